#!/usr/bin/env bash
# Session 22, call 1: the FP8 narrow kernel with two tiles a softmax pass (FP8 pages) against the
# tree before it (.carry/s22A.patch = git diff HEAD -- kernels lib), then both trees' narrow
# timelines at 32 rows (H = 16, s_q = 2, 8K).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
OUT=$OUT PATCH=.carry/s22A.patch SUITES=none \
  FP8_ONLY=B128_H16_sq1_L8k_dc512,B128_H16_sq2_L8k_dc512,B128_H16_sq1_L32k_dc512,B128_H16_sq2_L32k_dc512 \
  TESTS="test_kernels_fp8_gpu test_kernels_kv4_gpu" bash tools/mla-bench/run_ab_patch_device.sh
for tt in new:. base:/tmp/base-src; do
  name=${tt%%:*} tree=${tt#*:} bt=/tmp/bt-${tt%%:*}
  cmake -S $tree -B $bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > "$OUT/tl-build.log" 2>&1 &&
    cmake --build $bt -j16 --target mla_fp8_capi >> "$OUT/tl-build.log" 2>&1 || { tail -20 "$OUT/tl-build.log"; continue; }
  for sq in 2 1; do
    echo "=== timeline fp8-narrow, $name, H 16 s_q $sq"
    python3 tools/mla-bench/timeline.py --kernel fp8-narrow --lib $bt/tools/mla-bench/libmla_fp8_capi.so --heads 16 --s-q $sq \
      --json "$OUT/tl_${name}_sq$sq.json" 2>&1 | tail -24
  done
done
echo "total $(( $(date +%s) - T0 )) s"
