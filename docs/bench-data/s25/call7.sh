#!/usr/bin/env bash
# Session 25, call 7: A/B of the 64-row FP8 kernel's softmax inputs read under S (this tree) against
# the tree before it (the patch reversed), FP8 and 4-bit GPU tests first. Carry [".peer", ".carry"].
# Usage (GPU machine, repo root): OUT=dir bash docs/bench-data/s25/call7.sh
OUT=${OUT:-/tmp/s25} PATCH=.carry/inputs.patch SUITES=none \
  FP8_ONLY=B128_H64_sq1_L8k_dc512,B128_H128_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512,B128_H128_sq1_L32k_dc512 \
  KV4_SUITES="fp4rows" KV4_ARGS="--routes fp8" TESTS="test_kernels_fp8_gpu test_kernels_kv4_gpu" TEST_TIMEOUT=120 \
  STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh
