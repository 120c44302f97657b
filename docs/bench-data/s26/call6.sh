#!/usr/bin/env bash
# Session 26, call 6 (nvidia-h200, carry .peer .carry): v6's S with Q's RoPE block in registers (its four
# k-steps register-A, FlashMLA's rQ8; .carry/s26E.patch = docs/bench-data/s26/v6-rope-q-in-registers.patch,
# the working tree's change on 656bda0) against the tree before it: decode GPU tests, then the manyhead suite
# with the base and FlashMLA interleaved in one process.
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s26E.patch SUITES=manyhead TESTS=test_kernels_decode_gpu TEST_TIMEOUT=200 \
  STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh
