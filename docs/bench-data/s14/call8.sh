#!/usr/bin/env bash
# Session 14, call 8 (nvidia-h200, carry .peer .carry): the FP8 64-row kernel's query loaded ahead
# by warpgroup 0 (.carry/s14e.patch) against the tree before it: FP8 and 4-bit GPU tests, then the
# FP8 shapes in alternated processes (peer_fp8.py, twice each).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s14e.patch TESTS="test_kernels_fp8_gpu test_kernels_kv4_gpu" SUITES=" " \
  FP8_ONLY=B128_H128_sq1_L8k_dc512,B128_H64_sq2_L8k_dc512,B128_H128_sq1_L32k_dc512,B128_H128_sq2_L8k_dc512
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-200
