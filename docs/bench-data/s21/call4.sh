#!/usr/bin/env bash
# Session 21, call 4: the narrow kernel's FP4 conversion shares weighted (P.V warps one part,
# warpgroup 3 two) against the equal interleaved shares, in one call (.carry/s21C.patch).
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s21C.patch SUITES=none KV4_SUITES="fp4 fp4rows" \
  TESTS="test_kernels_kv4_gpu test_kernels_fp8_gpu" bash tools/mla-bench/run_ab_patch_device.sh
