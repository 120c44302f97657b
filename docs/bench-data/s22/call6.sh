#!/usr/bin/env bash
# Session 22, call 6: every single-GPU test binary of the final tree (label gpu; the multi-device
# one needs two GPUs and skips on one).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
T="test_kernels_decode_gpu test_kernels_prefix_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu test_verify_decode_gpu test_multi_device_gpu test_verify_kv4_fp8_route_gpu"
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target $T >> "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
(cd /tmp/b && timeout 400 ctest -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Test #|Failed|Not Run" "$OUT/ctest_gpu.log" | tail -20
echo "total $(( $(date +%s) - T0 )) s"
