#!/usr/bin/env bash
# Session 21, call 6: the 64-row / pair FP8 kernels' P8^T stored as 32-bit words (four tokens of a
# row a store) instead of 16-bit halves, against the tree before it (.carry/s21E.patch).
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s21E.patch SUITES=none KV4_SUITES=fp4rows \
  FP8_ONLY=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq1_L32k_dc512,B128_H128_sq1_L8k_dc256 \
  TESTS="test_kernels_fp8_gpu test_kernels_kv4_gpu" bash tools/mla-bench/run_ab_patch_device.sh
