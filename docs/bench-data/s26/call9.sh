#!/usr/bin/env bash
# Session 26, call 9 (nvidia-h200, carry .peer .carry): F = D plus S of the next tile issued behind warpgroup 0's
# P.V inside the iteration (.carry/s26F.patch = docs/bench-data/s26/v6-s-ahead-F.patch on 4b8c76c): decode GPU
# tests, then the dc512 A/B beside the base and FlashMLA.
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s26F.patch SUITES=dc512 TESTS=test_kernels_decode_gpu TEST_TIMEOUT=200 \
  STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh
