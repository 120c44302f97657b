#!/usr/bin/env bash
# Session 26, call 1 (nvidia-h200, carry .peer .carry): v6 with P in the stage's RoPE block and an
# mbarrier hand-over (docs/bench-data/s26/v6-p-in-stage.patch = .carry/s26A.patch, the working tree's
# change) against the tree before it: decode GPU tests, then the manyhead suite with the base and
# FlashMLA interleaved in one process (paired ratios, outputs compared bit for bit).
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s26A.patch SUITES=manyhead TESTS=test_kernels_decode_gpu TEST_TIMEOUT=200 \
  STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh
