#!/usr/bin/env bash
# Session 21, call 5: the FP4 conversion with every group of a share in flight (narrow kernel) and the
# scale row in one vector load, against the tree before it, in one call (.carry/s21D.patch).
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s21D.patch SUITES=none KV4_SUITES="fp4 fp4rows" \
  TESTS="test_kernels_kv4_gpu test_kernels_fp8_gpu" bash tools/mla-bench/run_ab_patch_device.sh
