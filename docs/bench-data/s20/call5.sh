#!/usr/bin/env bash
# Session 20, call 5 (nvidia-h200, carry .peer .carry): default parts above the slots = the largest
# divisor of the batch within 90% of them (.carry/parts.patch: lib/quant/decode_twin_bf16.hpp), so
# 256 rows at B = 128 take 32 parts of four whole requests (v6 fuses the merge) instead of 33 that
# cut a quarter of the requests and launch the combine. A/B against the tree before it in one
# process (dc512 suite, plus 256 rows at 4K and 32K), the decode and FP8 GPU tests, FP8 256 rows.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/parts.patch TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu" SUITES=dc512
export FP8_ONLY=B128_H128_sq2_L8k_dc512,B128_H128_sq2_L32k_dc512
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-420
rm -f "$OUT"/cfg*.log "$OUT"/build*.log
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
for s in h128_sq2_l4k h128_sq2_l32k; do
  timeout 100 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
    --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so --only $s --no-ceilings 2>&1 | tail -1 | cut -c1-420
done
echo "call total $(( $(date +%s) - T0 )) s"
