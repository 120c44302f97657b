#!/usr/bin/env bash
# Session 20, call 3 (nvidia-h200, carry .peer; the tree with s19's next-seesaw-exact.patch applied):
# is the seesaw's remaining gap cycles or clock? (1) Nsight Compute at its locked clocks: cycles,
# tensor-pipe activity, instructions, L2 sectors, DRAM bytes of FlashMLA, v6 (variant 0) and the exact
# seesaw (variant 8) at 128 rows 32K and 256 rows 8K; (2) energy per call at the sustained power cap
# (power_draw.py, no L2 flush, 2 s a phase) of v6 and variant 8, each beside FlashMLA, on the five
# dc512 shapes.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > /tmp/peer.log 2>&1; echo "peer rc=$?" >> /tmp/peer.log) &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi > /tmp/build.log 2>&1 || { grep -E "error" /tmp/build.log | head; exit 1; }
wait; tail -1 /tmp/peer.log; echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/tools/mla-bench PYTHONUNBUFFERED=1
L=/tmp/b/tools/mla-bench/libmla_decode_capi.so
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,lts__t_sectors_op_read.sum,dram__bytes_read.sum
for shape in h128_sq1_l32k h128_sq2_l8k; do
  for who in flashmla v6 seesaw; do
    v=0; [ $who = seesaw ] && v=8
    re='decode_split_'; [ $who = flashmla ] && re='flash_fwd_splitkv_mla'
    timeout 90 "$NCU" --kernel-name "regex:$re" --launch-skip 1 --launch-count 2 --metrics $M --csv \
      python3 tools/mla-bench/peer_flashmla.py --lib $L --variant $v --only $shape \
      --runs 1 --warmup 1 --no-ceilings > /tmp/ncu_${shape}_$who.csv 2>&1
    echo "== ncu $shape $who rc=$?"
    grep -E '^"[0-9]' /tmp/ncu_${shape}_$who.csv | awk -F'","' '{print $(NF-2) " = " $NF}' | tr -d '"' | tail -6 | tee -a "$OUT/ncu.txt"
  done
done
echo "ncu done $(( $(date +%s) - T0 )) s"
for v in 0 8; do
  echo "=== power: variant $v" | tee -a "$OUT/power.txt"
  timeout 120 python3 tools/mla-bench/power_draw.py --lib $L --variant $v \
    --shape 128:1:8192,128:2:8192,64:2:8192,128:1:32768,64:1:8192 --seconds 2 --rounds 1 2>&1 | grep -v "^$" | tail -11 | tee -a "$OUT/power.txt"
done
echo "call total $(( $(date +%s) - T0 )) s"
