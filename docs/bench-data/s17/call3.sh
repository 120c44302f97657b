#!/usr/bin/env bash
# Session 17, call 3 (nvidia-h200; carry .peer .carry): session 16's prepared question. The seesaw
# probe (FlashMLA's order, not twin-exact) with every thread reading the next tiles' page-table
# entries (docs/bench-data/s16/next-seesaw-probe-uniform-rows.patch = .carry/s17s.patch) against v6
# (the base), beside FlashMLA (dc512 suite); then Nsight Compute's stall samples by opcode of the
# probe at 128 rows 8K (session 16 call 8: the probe without this change stalled 22% at HGMMA issue,
# FlashMLA 11%).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s17s.patch TESTS="" SUITES=none
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PF="python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so"
timeout 90 $PF --only h128_sq1_l8k --runs 3 --warmup 1 --no-ceilings 2>&1 | tail -1
rc=$?; echo "sanity rc=$rc ($(( $(date +%s) - T0 )) s)"
[ $rc -eq 0 ] || { echo "sanity failed: stop"; exit 1; }
timeout 200 $PF --suite dc512 --json "$OUT/ab_dc512.json" 2>&1 | tail -8
echo "suite done ($(( $(date +%s) - T0 )) s)"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 120 "$NCU" --kernel-name "regex:decode_split_" --launch-skip 1 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --export /tmp/rep_seesaw python3 tools/mla-bench/peer_flashmla.py \
  --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --only h128_sq1_l8k --runs 1 --warmup 1 --no-ceilings --no-peer \
  > /dev/null 2>&1
echo "== ncu rc=$? ($(( $(date +%s) - T0 )) s)"
"$NCU" --import /tmp/rep_seesaw.ncu-rep --page source --csv --print-source sass > /tmp/sass_seesaw.csv 2>&1
python3 - /tmp/sass_seesaw.csv <<'PY' | tee "$OUT/stalls-by-opcode.txt"
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
    if base == "BAR": return "BAR (named barrier) " + op
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
print(f"--- seesaw probe, uniform page-table reads: {tot_a:.0f} samples ({tot_n:.0f} not issued), {len(body)} instructions")
for c, (a, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:14]:
    print(f"  {a / tot_a * 100:5.1f}% all  {n / max(tot_n, 1) * 100:5.1f}% not-issued  {c}")
PY
echo "call total $(( $(date +%s) - T0 )) s"
