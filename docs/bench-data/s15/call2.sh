#!/usr/bin/env bash
# Session 15, call 2 (nvidia-h200, carry .peer .carry). Two A/Bs in one process each, manyhead suite:
#  1. the combine as a programmatic dependent launch (.carry/s15c.patch: v6 / v7 trigger at their
#     start) against the tree before it; decode / FP8 / 4-bit GPU tests of the PDL tree;
#  2. the combine's loads in flight alone (.carry/s15b.patch, commit b517bae) against b517bae~1.
set -uo pipefail
OUT0=${OUT:-/tmp/mla-out}
OUT=$OUT0/pdl PATCH=.carry/s15c.patch TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu" \
  SUITES=manyhead bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
for i in 1 2 3; do  # the PDL tree's decode tests again: its failure mode in v4 was intermittent
  timeout 200 /tmp/b/tests/kernels/test_kernels_decode_gpu > $OUT0/pdl/decode_rep$i.log 2>&1; echo "decode rep $i rc=$?"
done
patch -s -R -p1 < .carry/s15c.patch || { echo "patch -R s15c failed"; exit 1; }
OUT=$OUT0/combine PATCH=.carry/s15b.patch TESTS=test_kernels_decode_gpu SUITES=manyhead \
  bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
