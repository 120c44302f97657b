#!/usr/bin/env bash
# Session 10 call 4 (nvidia-h200; may come as an H100): the FP8 (issue 11) and 4-bit (issue 12)
# records beside FlashMLA after the ldmatrix V^T change, from HBM, then the FP8 and 4-bit GPU tests.
set -uo pipefail
T0=$(date +%s)
SUITES="fp8 kv4" MODES="hbm" OUT=$OUT bash tools/mla-bench/run_peers_device.sh 2>&1 | tee $OUT/record.txt
cmake --build /tmp/b -j16 --target test_kernels_fp8_gpu test_kernels_kv4_gpu > /tmp/bt.log 2>&1 || tail -20 /tmp/bt.log
for t in test_kernels_fp8_gpu test_kernels_kv4_gpu; do
  timeout 150 /tmp/b/tests/kernels/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/$t.log | head -6
done
echo "total $(( $(date +%s) - T0 )) s"
