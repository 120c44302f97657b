#!/usr/bin/env bash
# Session 16, call 2 (nvidia-h200, carry .peer .carry): the seesaw kernel (d_c = 512, d_r = 64;
# .carry/s16b.patch) against v6 (the tree before it), beside FlashMLA: a one-shape sanity run
# first (hang guard), then the decode GPU tests, the dc512 suite + 256 rows 32K, and Nsight Compute
# counters of the seesaw at 8K / 32K (compare call 1's v6 and FlashMLA figures).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s16b.patch TESTS="" SUITES=none
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
(cmake --build /tmp/b -j8 --target test_kernels_decode_gpu > "$OUT/build_tests.log" 2>&1; echo "test build rc=$?" >> "$OUT/build_tests.log") &
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PF="python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so"
timeout 90 $PF --only h128_sq1_l8k --runs 3 --warmup 1 --no-ceilings 2>&1 | tail -3
rc=$?; echo "sanity rc=$rc ($(( $(date +%s) - T0 )) s)"
[ $rc -eq 0 ] || { echo "sanity failed: stop"; exit 1; }
wait; tail -1 "$OUT/build_tests.log"
timeout 200 /tmp/b/tests/kernels/test_kernels_decode_gpu > "$OUT/test_kernels_decode_gpu.log" 2>&1
echo "decode gpu tests rc=$? ($(( $(date +%s) - T0 )) s)"
grep -E "^\[  (PASSED|FAILED)|Failure|FAILED" "$OUT/test_kernels_decode_gpu.log" | head -12
timeout 200 $PF --suite dc512 --json "$OUT/ab_dc512.json" 2>&1 | tail -8
timeout 60 $PF --only h128_sq2_l32k --runs 12 --no-ceilings --json "$OUT/ab_h128_sq2_l32k.json" 2>&1 | tail -1
echo "timing done ($(( $(date +%s) - T0 )) s)"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,lts__t_sectors_op_read.sum
for shape in h128_sq1_l32k h128_sq1_l8k; do
  [ $(( $(date +%s) - T0 )) -gt 500 ] && { echo "ncu skipped ($shape): time"; continue; }
  timeout 60 "$NCU" --kernel-name "regex:decode_split_" --launch-skip 1 --launch-count 1 --metrics $M --csv \
    python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --only $shape \
    --runs 1 --warmup 1 --no-ceilings --no-peer > "$OUT/ncu_${shape}_seesaw.csv" 2>&1
  echo "== ncu $shape seesaw rc=$?"
  grep -E '^"[0-9]' "$OUT/ncu_${shape}_seesaw.csv" | awk -F'","' '{print $(NF-2) " = " $NF}' | tr -d '"'
done
echo "call total $(( $(date +%s) - T0 )) s"
