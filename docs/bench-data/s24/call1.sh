#!/usr/bin/env bash
# Session 24, call 1: the FP4 conversion with its offsets kept, a poison-free fast path and the
# shares' work rebalanced (kernels/fp4_to_fp8.cuh Fp4TileConverter) against the tree before it
# (658b59b; .carry/s24A.patch = git diff 658b59b -- kernels lib): the FP8 route of the FP4 cache,
# narrow and 64-row shapes, alternated processes; the FP8 and 4-bit GPU tests first.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
OUT=$OUT PATCH=.carry/s24A.patch SUITES=none KV4_SUITES="fp4 fp4rows" KV4_ARGS="--routes fp8" \
  TESTS="test_kernels_kv4_gpu test_kernels_fp8_gpu" TEST_TIMEOUT=90 STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh
