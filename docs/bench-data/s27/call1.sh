#!/usr/bin/env bash
# Session 27, call 1 (nvidia-h200, carry .peer .carry): v6 with warpgroup 1's P.V deferred behind S of the next
# tile and the ring released in three groups a stage (.carry/s27dpv.patch = docs/bench-data/s27/s27dpv.patch,
# the change on e18e28b; v6-deferred-pv.patch is the same with the span records and timeline labels): decode GPU tests, the manyhead A/B beside the base and FlashMLA, then timelines of the
# new kernel at 128 and 256 rows 8K (default parts).
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s27dpv.patch SUITES=manyhead TESTS=test_kernels_decode_gpu TEST_TIMEOUT=200 \
  STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh || exit 1
OUT=${OUT:-/tmp/mla-out} SHAPES="128 1 64;128 2 33" TAG=tl bash docs/bench-data/s26/call7.sh
