#!/usr/bin/env bash
# Session 24, call 2: the 64-row kernel's FP4 conversion in six shares, two of them on warpgroup 3
# (registers 112 / 176 / 48), against the tree before it (7494c81; .carry/s24B.patch = git diff
# 7494c81 -- kernels lib): the FP8 route of the FP4 cache at the 64-row shapes, alternated
# processes; the FP8 and 4-bit GPU tests first.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
OUT=$OUT PATCH=.carry/s24B.patch SUITES=none KV4_SUITES="fp4rows" KV4_ARGS="--routes fp8" \
  TESTS="test_kernels_kv4_gpu test_kernels_fp8_gpu" TEST_TIMEOUT=90 STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh
