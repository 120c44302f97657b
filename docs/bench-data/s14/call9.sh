#!/usr/bin/env bash
# Session 14, call 9 (nvidia-h200, carry .peer .carry): the combine fused into v6 (.carry/s14f.patch)
# A/B'd against the tree before it in one process (dc512 and manyhead suites), the decode and FP8
# GPU tests (the FP8 narrow kernel's merge moved), then the new tree's per-request constant.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s14f.patch TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu" \
  SUITES="dc512 manyhead"
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-220
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 150 python3 tools/mla-bench/segment_cost.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --heads 128 \
  --parts 64 2>&1 | grep -v -i warn | tee "$OUT/segment_cost.log"
