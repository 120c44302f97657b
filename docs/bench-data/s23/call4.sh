#!/usr/bin/env bash
# Session 23, call 4: the FP4 narrow route at 16 rows with 640 threads: three converting shares of
# their own (warps 12-17), a copying warp (18), the P.V warps not converting, against the tree before
# it (04016e6; .carry/s23D.patch = git diff 04016e6 -- kernels lib), FP8 route of the FP4 cache, narrow
# shapes; then this tree's
# fp4-narrow timeline at H = 16 8K.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > "$OUT/tl-build.log" 2>&1 &&
  (cmake --build /tmp/bt -j3 --target mla_kv4_capi >> "$OUT/tl-build.log" 2>&1; echo "tl build rc=$?" >> "$OUT/tl-build.log") &
OUT=$OUT PATCH=.carry/s23D.patch SUITES=none KV4_SUITES="fp4" KV4_ARGS="--routes fp8" \
  TESTS="test_kernels_kv4_gpu test_kernels_fp8_gpu" TEST_TIMEOUT=90 STOP_ON_FAIL=1 bash tools/mla-bench/run_ab_patch_device.sh || exit 1
wait
tail -1 "$OUT/tl-build.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
echo "=== timeline fp4-narrow, this tree, H 16 s_q 1"
timeout 60 python3 tools/mla-bench/timeline.py --kernel fp4-narrow --lib /tmp/bt/tools/mla-bench/libmla_kv4_capi.so --heads 16 2>&1 | tail -30
echo "total $(( $(date +%s) - T0 )) s"
