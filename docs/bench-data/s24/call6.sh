#!/usr/bin/env bash
# Session 24, call 6: the 64-row kernel's FP4 conversion under k-step 1's wgmmas
# against the tree before it (e29c882; .carry/s24D.patch = git diff
# e29c882 -- kernels lib): the FP8 route of the FP4 cache at the 64-row shapes, alternated
# processes; the FP8 and 4-bit GPU tests first.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
OUT=$OUT PATCH=.carry/s24D.patch SUITES=none KV4_SUITES="fp4rows" KV4_ARGS="--routes fp8" \
  TESTS="test_kernels_kv4_gpu test_kernels_fp8_gpu" TEST_TIMEOUT=90 STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh
