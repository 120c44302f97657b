#!/usr/bin/env bash
# Session 15, call 1 (nvidia-h200, carry .peer .carry): the GPU tests of the tree (the first run of
# session 14's compile-checked review commits) and an A/B of .carry/s15a.patch against the tree
# before it in one process: the combine with a split's column loads in flight (merge_splits_row
# templated on d_c) and v7 loading the next segment's Q ahead; both bit-identical by construction.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s15a.patch \
  TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu" SUITES="manyhead issue10"
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
