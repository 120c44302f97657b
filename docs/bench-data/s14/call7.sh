#!/usr/bin/env bash
# Session 14, call 7 (nvidia-h200, carry .peer .carry): Q of the next request loaded at the epilogue (not in the tile loop; call 6 had it after the
# last tile's S) in v6 (.carry/s14d.patch) A/B'd against the tree before it in one process (dc512
# suite), the decode GPU tests, then the per-request constant of the new tree (segment_cost.py).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s14d.patch TESTS=test_kernels_decode_gpu SUITES="dc512 manyhead"
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-220
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 150 python3 tools/mla-bench/segment_cost.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --heads 128 \
  --parts 64 2>&1 | grep -v -i warn | tee "$OUT/segment_cost.log"
