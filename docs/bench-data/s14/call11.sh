#!/usr/bin/env bash
# Session 14, call 11 (nvidia-h200, carry .peer .carry): the combine fused into v6 where parts hold
# whole requests (.carry/s14h.patch) A/B'd against the tree before it in one process on the whole
# issue-10 suite (the session's record), the decode / FP8 / 4-bit / verify-decode GPU tests.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s14h.patch \
  TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu test_verify_decode_gpu" SUITES=issue10
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | grep -v "test_verify_decode_gpu rc" | cut -c1-220
timeout 200 /tmp/b/tests/verify/test_verify_decode_gpu > "$OUT/test_verify_decode_gpu.log" 2>&1
echo "verify rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$OUT/test_verify_decode_gpu.log"
