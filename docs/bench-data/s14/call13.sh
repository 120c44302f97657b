#!/usr/bin/env bash
# Session 14, call 13 (nvidia-h200): every GPU test of the final tree (ctest -L gpu: the kernels,
# verify-decode, multi-device where one GPU allows, and the PyTorch package's device checks).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 &&
  cmake --build /tmp/b -j16 > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
(cd /tmp/b && timeout 240 ctest -L gpu --output-on-failure -j3 > "$OUT/ctest_gpu.log" 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*|Passed|Skipped" "$OUT/ctest_gpu.log" | tail -30
echo "total $(( $(date +%s) - T0 )) s"
