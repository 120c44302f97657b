#!/usr/bin/env bash
# Session 22, call 3: the FP4 -> FP8 conversion (kernels/fp4_to_fp8.cuh) as one basic block a
# chunk of groups (loads, tables, conversions, stores; no branch a group) against the tree before
# it (.carry/s22C.patch = git diff HEAD -- kernels lib), on the FP4 cache's FP8 route (narrow and
# 64-row kernels), then this tree's fp4-narrow timeline at H = 16 8K.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > "$OUT/tl-build.log" 2>&1 &&
  (cmake --build /tmp/bt -j3 --target mla_kv4_capi >> "$OUT/tl-build.log" 2>&1; echo "tl build rc=$?" >> "$OUT/tl-build.log") &
OUT=$OUT PATCH=.carry/s22C.patch SUITES=none KV4_SUITES="fp4 fp4rows" \
  TESTS="test_kernels_kv4_gpu test_kernels_fp8_gpu" bash tools/mla-bench/run_ab_patch_device.sh
wait
tail -1 "$OUT/tl-build.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
echo "=== timeline fp4-narrow, this tree, H 16 s_q 1"
python3 tools/mla-bench/timeline.py --kernel fp4-narrow --lib /tmp/bt/tools/mla-bench/libmla_kv4_capi.so --heads 16 2>&1 | tail -26
echo "total $(( $(date +%s) - T0 )) s"
