#!/usr/bin/env bash
# Session 18, call 5 (nvidia-h200; carry .peer): why the FP8 64-row kernel's softmax takes ~1,160
# cycles a tile for ~380 instructions even with warpgroups 1-2 idle (call 3), and did not move
# when its dependency chains were cut (call 4). Nsight Compute on the unchanged kernel at H = 128
# s_q = 1 8K: the kernel's warp-state breakdown (is it "no instruction", i.e. instruction-cache
# misses, or dependencies?) and the per-instruction stall reasons of the softmax's MUFU.EX2 block.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > /tmp/peer.log 2>&1; echo "peer rc=$?" >> /tmp/peer.log) &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_fp8_capi > /tmp/build.log 2>&1 || { grep error /tmp/build.log | head; exit 1; }
wait; tail -1 /tmp/peer.log; echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/tools/mla-bench PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 200 "$NCU" --kernel-name "regex:rows64_split" --launch-skip 1 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --section InstructionStats --export /tmp/rep python3 tools/mla-bench/peer_fp8.py \
  --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so --only B128_H128_sq1_L8k_dc512 --runs 1 --warmup 1 > /tmp/ncu.log 2>&1
echo "== ncu rc=$? ($(( $(date +%s) - T0 )) s)"; tail -3 /tmp/ncu.log
"$NCU" --import /tmp/rep.ncu-rep --page details > "$OUT/ncu_details.txt" 2>&1
grep -E "Stall|Warp Cycles|Issued|Eligible|No Eligible" "$OUT/ncu_details.txt" | head -40
"$NCU" --import /tmp/rep.ncu-rep --page raw --csv 2>/dev/null | python3 -c "
import csv,sys
r=list(csv.reader(sys.stdin)); h=r[0]; v=r[-1]
for k,x in zip(h,v):
  if 'warp_issue_stalled' in k and k.endswith('per_warp_active.pct') or 'inst_executed_op' in k: print(k, x)
" > "$OUT/ncu_raw_stalls.txt" 2>&1; sort -t' ' -k2 -g -r "$OUT/ncu_raw_stalls.txt" | head -30
"$NCU" --import /tmp/rep.ncu-rep --page source --csv --print-source sass > /tmp/sass.csv 2>&1
python3 tools/mla-bench/ncu_stalls.py /tmp/sass.csv --top 40 --label "fp8 rows64, 128 rows 8K" > "$OUT/stalls.txt" 2>&1; head -80 "$OUT/stalls.txt"
python3 - /tmp/sass.csv <<'PY' > "$OUT/softmax_stall_reasons.txt"
# every stall-reason column summed over the MUFU.EX2 block's neighbourhood (the softmax) vs the whole kernel
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if "Source" in r)
h = rows[hdr]; src = h.index("Source")
cols = [i for i, k in enumerate(h) if "stall" in k.lower() or "Sampling" in k]
print("columns:", [h[i] for i in cols])
body = rows[hdr + 1:]
ex = [i for i, r in enumerate(body) if len(r) > src and "MUFU.EX2" in r[src]]
def f(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
if ex:
    lo, hi = ex[0] - 120, ex[min(len(ex) - 1, 40)] + 120
    for name, rng in (("softmax window", body[lo:hi]), ("kernel", body)):
        print("==", name, len(rng), "instructions")
        for i in cols:
            s = sum(f(r[i]) for r in rng if len(r) > i)
            if s: print(f"  {h[i]}: {s:.0f}")
PY
head -60 "$OUT/softmax_stall_reasons.txt"
echo "call total $(( $(date +%s) - T0 )) s"
