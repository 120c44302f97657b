#!/usr/bin/env bash
# Session 16, call 8 (nvidia-h200, carry .peer .carry): where the warps of FlashMLA's dense decode
# kernel, of v6 and of the seesaw probe (effca05, FlashMLA's order) wait, by SASS opcode: Nsight
# Compute's warp-stall samples per instruction at 128 rows 8K, summed by opcode class (named
# barriers, mbarrier waits, wgmma waits, wgmma issue, SFU, ...). The builds: the probe as the
# patched tree (/tmp/b), v6 as the base (/tmp/bb).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s16-probe.patch TESTS="" SUITES=none
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-200 | tail -3
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for who in flashmla v6 seesaw; do
  lib=/tmp/b; [ $who = v6 ] && lib=/tmp/bb
  re='decode_split_'; extra=--no-peer; [ $who = flashmla ] && { re='flash_fwd_splitkv_mla'; extra=; }
  timeout 150 "$NCU" --kernel-name "regex:$re" --launch-skip 1 --launch-count 1 --section SourceCounters \
    --section WarpStateStats --export "$OUT/rep_$who" python3 tools/mla-bench/peer_flashmla.py \
    --lib $lib/tools/mla-bench/libmla_decode_capi.so --only h128_sq1_l8k --runs 1 --warmup 1 --no-ceilings $extra \
    > /dev/null 2>&1
  echo "== $who rc=$? ($(( $(date +%s) - T0 )) s)"
  "$NCU" --import "$OUT/rep_$who.ncu-rep" --page source --csv --print-source sass > "$OUT/sass_$who.csv" 2>&1
  python3 - "$OUT/sass_$who.csv" <<'PY' | tee -a "$OUT/call8-stalls-by-opcode.txt"
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if "Source" in r and any(k.startswith("Warp Stall Sampling (All") for k in r))
h = rows[hdr]; isrc = h.index("Source")
ia = next(i for i, k in enumerate(h) if k.startswith("Warp Stall Sampling (All"))
ini = next(i for i, k in enumerate(h) if k.startswith("Warp Stall Sampling (Not"))
def num(v):
    try: return float(v.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
def cls(src):
    op = re.sub(r"^@!?U?P[T0-9]+\s+", "", src.strip()).split(" ")[0]
    base = op.split(".")[0]
    if base in ("BAR",): return "BAR (named barrier) " + op
    if base == "SYNCS": return "SYNCS (mbarrier wait/arrive)"
    if op.startswith("WARPGROUP.DEPBAR"): return "WARPGROUP.DEPBAR (wgmma wait)"
    if op.startswith("WARPGROUP"): return "WARPGROUP.ARRIVE"
    if base == "HGMMA": return "HGMMA (issue)"
    if base == "BRA": return "BRA (mostly wait-loop retries)"
    return base
tot_a = sum(num(r[ia]) for r in body); tot_n = sum(num(r[ini]) for r in body)
agg = collections.defaultdict(lambda: [0.0, 0.0])
for r in body:
    c = cls(r[isrc]); agg[c][0] += num(r[ia]); agg[c][1] += num(r[ini])
print(f"--- {sys.argv[1].split('/')[-1]}: {tot_a:.0f} samples ({tot_n:.0f} not issued), {len(body)} instructions")
for c, (a, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:16]:
    print(f"  {a / tot_a * 100:5.1f}% all  {n / max(tot_n, 1) * 100:5.1f}% not-issued  {c}")
PY
  "$NCU" --import "$OUT/rep_$who.ncu-rep" --page details 2>&1 | grep -E "Elapsed Cycles|Warp Cycles Per Issued|Issued Warp Per" | head -4
  rm -f "$OUT/sass_$who.csv" "$OUT/rep_$who.ncu-rep"
done
echo "call total $(( $(date +%s) - T0 )) s"
