#!/usr/bin/env bash
# Session 17, call 2 (nvidia-h200; carry .peer): why the FP8 wide kernel's tile takes ~5,400 cycles
# (call 1: 2.96 us a tile at H = 64 and at H = 128 alike). The tree (commit 6c4e4c0) carries a temporary runtime probe
# (MLA_WIDE_PROBE bits: 1 transposers copy nothing, 2 no softmax, 4 no P.V wgmmas, 16 transposers do
# not wait for a free V^T buffer, 32 consumers do not wait for V^T; results wrong, timing only),
# timed at H = 64 / 128 s_q = 1 8K; then Nsight Compute's stall samples per SASS line of the
# unprobed kernel at H = 64 (the top lines, and by opcode class).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > /tmp/peer.log 2>&1; echo "peer rc=$?" >> /tmp/peer.log) &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /tmp/cfg.log 2>&1 || { tail /tmp/cfg.log; exit 1; }
cmake --build /tmp/b -j12 --target mla_fp8_capi > /tmp/build.log 2>&1 || { grep error /tmp/build.log | head; exit 1; }
wait
echo "build + peer $(( $(date +%s) - T0 )) s; $(tail -1 /tmp/peer.log)"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PF="python3 tools/mla-bench/peer_fp8.py --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so"
SH=B128_H64_sq1_L8k_dc512,B128_H128_sq1_L8k_dc512
for pr in 0 1 2 4 16 32 3 7 48 0; do
  echo "=== probe $pr ($(( $(date +%s) - T0 )) s)"
  MLA_WIDE_PROBE=$pr timeout 60 $PF --only "$SH" --runs 8 2>&1 | grep -E "^B128" | cut -c1-60
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 "$NCU" --kernel-name "regex:wide_split" --launch-skip 1 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --section SchedulerStats --export /tmp/rep_wide \
  $PF --only B128_H64_sq1_L8k_dc512 --runs 1 --warmup 1 > /tmp/ncu.log 2>&1
echo "== ncu rc=$? ($(( $(date +%s) - T0 )) s)"; tail -3 /tmp/ncu.log
"$NCU" --import /tmp/rep_wide.ncu-rep --page details > "$OUT/ncu_details.txt" 2>&1
grep -E "Warp Cycles|Issued|Eligible|Active Warps|No Eligible|Stall" "$OUT/ncu_details.txt" | head -20
"$NCU" --import /tmp/rep_wide.ncu-rep --page source --csv --print-source sass > /tmp/sass_wide.csv 2>&1
python3 - /tmp/sass_wide.csv <<'PY' | tee "$OUT/stalls.txt"
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if "Source" in r and any(k.startswith("Warp Stall Sampling (All") for k in r))
h = rows[hdr]; isrc = h.index("Source"); iad = h.index("Address") if "Address" in h else 0
ia = next(i for i, k in enumerate(h) if k.startswith("Warp Stall Sampling (All"))
def num(v):
    try: return float(v.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
tot = sum(num(r[ia]) for r in body)
print(f"{tot:.0f} samples, {len(body)} instructions; top lines (address, % of samples, source):")
for r in sorted(body, key=lambda r: -num(r[ia]))[:45]:
    print(f"  {r[iad]:>8} {num(r[ia]) / tot * 100:5.1f}%  {r[isrc].strip()[:90]}")
agg = collections.Counter()
for r in body:
    op = re.sub(r"^@!?U?P[T0-9]+\s+", "", r[isrc].strip()).split(" ")[0]
    agg[op] += num(r[ia])
print("by opcode:")
for op, a in agg.most_common(14):
    print(f"  {a / tot * 100:5.1f}%  {op}")
PY
echo "call total $(( $(date +%s) - T0 )) s"
