#!/usr/bin/env bash
# Session 20, call 6 (nvidia-h200, carry .peer .carry): v6's ring at two release groups a stage
# (.carry/groups.patch = docs/bench-data/s20/v6-two-group-ring.patch: group A = warpgroup 0's V
# blocks, released after its P.V; group B = warpgroup 1's V blocks and the RoPE block, released after
# both P.V; S starts on group A and waits for group B once, uniformly, mid-chain). A/B against the tree
# before it in one process beside FlashMLA (dc512), the decode GPU tests first.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/groups.patch TESTS="test_kernels_decode_gpu" SUITES=dc512
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-420
