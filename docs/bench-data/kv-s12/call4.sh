#!/usr/bin/env bash
# Session 12, call 4 (nvidia-h200): the review's verify changes (checked_kv4_route; the CUDA 4-bit
# backend's decode reordered) on the GPU: every GPU test under tests/verify (ctest -L gpu there).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader
ctest --test-dir /tmp/b/tests/verify -L gpu --output-on-failure > "$OUT/ctest-verify-gpu.txt" 2>&1
echo "ctest rc=$?"; grep -E "tests passed|Failed|Skipped|\*\*\*" "$OUT/ctest-verify-gpu.txt" | head -20
