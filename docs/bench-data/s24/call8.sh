#!/usr/bin/env bash
# Session 24, call 8: the 4-bit and FP8 GPU tests of the final tree (after the shares' compile-time
# coverage check in fp4_to_fp8.cuh, whose 64-row SASS differs from call 7's in register names only).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j"$(nproc)" --target test_kernels_kv4_gpu test_kernels_fp8_gpu >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
for t in test_kernels_kv4_gpu test_kernels_fp8_gpu; do
  timeout 90 /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$t.log" | head -5
done
echo "total $(( $(date +%s) - T0 )) s"
