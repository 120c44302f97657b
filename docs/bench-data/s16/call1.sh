#!/usr/bin/env bash
# Session 16, call 1 (nvidia-h200, carry .peer .carry): (1) v6's row-block pairs as 2-CTA
# clusters sharing each K tile by TMA multicast (.carry/s16a.patch) against the tree before it,
# beside FlashMLA (dc512 suite + 32K at 256 rows); (2) Nsight Compute counters at 32K and 8K
# (locked clocks): cycles, DRAM bytes, L2 hit rate, tensor-pipe activity of FlashMLA, the base
# and the pairs; (3) the decode GPU tests on the pairs, with what time is left.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s16a.patch TESTS="" SUITES=dc512
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
(cmake --build /tmp/b -j8 --target test_kernels_decode_gpu > "$OUT/build_tests.log" 2>&1; echo "test build rc=$?" >> "$OUT/build_tests.log") &
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 100 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
  --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so --only h128_sq2_l32k --runs 12 --no-ceilings \
  --json "$OUT/ab_h128_sq2_l32k.json" 2>&1 | tail -4
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,sm__cycles_elapsed.max,dram__bytes_read.sum,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_op_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum
for shape in h128_sq1_l32k h128_sq1_l8k; do
  for who in flashmla base pairs; do
    [ $(( $(date +%s) - T0 )) -gt 440 ] && { echo "ncu skipped ($shape $who): time"; continue; }
    lib=/tmp/b; [ $who = base ] && lib=/tmp/bb
    re='decode_split_'; [ $who = flashmla ] && re='flash_fwd_splitkv_mla'
    timeout 90 "$NCU" --kernel-name "regex:$re" --launch-skip 1 --launch-count 2 --metrics $M --csv \
      python3 tools/mla-bench/peer_flashmla.py --lib $lib/tools/mla-bench/libmla_decode_capi.so --only $shape \
      --runs 1 --warmup 1 --no-ceilings > "$OUT/ncu_${shape}_$who.csv" 2>&1
    echo "== ncu $shape $who rc=$?"
    grep -E '^"[0-9]' "$OUT/ncu_${shape}_$who.csv" | awk -F'","' '{print $(NF-2) " = " $NF}' | tr -d '"' | head -14
  done
done
left=$(( 560 - ($(date +%s) - T0) ))
if [ $left -gt 100 ]; then
  wait; tail -1 "$OUT/build_tests.log"
  timeout $(( left - 40 )) /tmp/b/tests/kernels/test_kernels_decode_gpu > "$OUT/test_kernels_decode_gpu.log" 2>&1
  echo "decode gpu tests rc=$? ($(( $(date +%s) - T0 )) s)"
  grep -E "^\[  (PASSED|FAILED)|Failure|OK \]" "$OUT/test_kernels_decode_gpu.log" | tail -20
fi
echo "call total $(( $(date +%s) - T0 )) s"
