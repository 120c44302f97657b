#!/usr/bin/env bash
# Session 16, call 3 (nvidia-h200, carry .peer .carry): the seesaw kernel with warpgroup 1's two P.V back to back when B's factors are 1 (
# .carry/s16c.patch) against v6 (the tree before it), beside FlashMLA: a one-shape sanity run
# first (hang guard), the dc512 suite + 256 rows 32K, then Nsight Compute's warp-stall samples per
# SASS instruction of the seesaw at 128 rows 8K (where its warpgroups wait). No GPU tests this
# call (call 2 ran them on the first version: 16/16).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s16c.patch TESTS="" SUITES=none
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PF="python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so"
timeout 90 $PF --only h128_sq1_l8k --runs 3 --warmup 1 --no-ceilings 2>&1 | tail -3
rc=$?; echo "sanity rc=$rc ($(( $(date +%s) - T0 )) s)"
[ $rc -eq 0 ] || { echo "sanity failed: stop"; exit 1; }
timeout 200 $PF --suite dc512 --json "$OUT/ab_dc512.json" 2>&1 | tail -8
timeout 60 $PF --only h128_sq2_l32k --runs 12 --no-ceilings --json "$OUT/ab_h128_sq2_l32k.json" 2>&1 | tail -1
echo "timing done ($(( $(date +%s) - T0 )) s)"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
shape=h128_sq1_l8k
timeout 150 "$NCU" --kernel-name "regex:decode_split_" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --export "$OUT/ncu_seesaw" \
  python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --only $shape \
  --runs 1 --warmup 1 --no-ceilings --no-peer > "$OUT/ncu_run.log" 2>&1
echo "== ncu $shape seesaw rc=$?"
"$NCU" --import "$OUT/ncu_seesaw.ncu-rep" --page details 2>&1 | grep -E "Duration|Elapsed Cycles|Tensor|Warp Cycles Per Issued|Stall" | head -30
"$NCU" --import "$OUT/ncu_seesaw.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2>&1
python3 - "$OUT/sass.csv" <<'PY' | tee "$OUT/call3-stall-top.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
h = rows[hdr]; ia, isrc = h.index("Address"), h.index("Source")
cand = [i for i, k in enumerate(h) if k.startswith("Warp Stall Sampling (All")]
iw = cand[0] if cand else None
print("columns:", [k for k in h if "Stall" in k][:6])
def num(v):
    try: return float(v.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
tot = sum(num(r[iw]) for r in body)
print(f"total samples {tot:.0f} over {len(body)} instructions")
for r in sorted(body, key=lambda r: -num(r[iw]))[:45]:
    print(f"{num(r[iw]) / tot * 100:5.1f}%  {r[ia]}  {r[isrc][:90]}")
PY
rm -f "$OUT/sass.csv" "$OUT"/ncu_*.csv "$OUT"/ncu_seesaw.ncu-rep "$OUT"/*.log.bak
echo "call total $(( $(date +%s) - T0 )) s"
