#!/usr/bin/env bash
# Session 24, call 7: every GPU test of the final tree (ctest -L gpu), with the Python package's C API
# libraries built too (session 22's call 6 built the test binaries alone, so the two package checks
# could not find them). On one H200 (the multi-device test's two-GPU cases skip; session 23 ran them on two).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi -L
T="test_kernels_decode_gpu test_kernels_prefix_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu test_verify_decode_gpu test_multi_device_gpu test_verify_kv4_fp8_route_gpu mla_toolchain_python"
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j"$(nproc)" --target $T >> "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
(cd /tmp/b && timeout 330 ctest -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Test +#|Failed|Not Run" "$OUT/ctest_gpu.log" | tail -70
echo "total $(( $(date +%s) - T0 )) s"
