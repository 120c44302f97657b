#!/usr/bin/env bash
# Session 11, call 4 (nvidia-h200): every GPU test of the final tree (ctest -L gpu: the decode,
# FP8 (with the block-scale bound), 4-bit, verify and both PyTorch package checks), one GPU.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
export NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 || exit 1
cmake --build /tmp/b -j16 > "$OUT/build.log" 2>&1 || { echo "build failed"; grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
(cd /tmp/b && timeout 420 ctest -L gpu --output-on-failure -j2 > "$OUT/ctest_gpu.log" 2>&1; echo "ctest rc=$?")
grep -E "tests passed|tests failed|Failed|\*\*\*|Total Test" "$OUT/ctest_gpu.log" | head -20
grep -E "^(PASS|FAIL|ok|checks)|passed|failed" "$OUT/ctest_gpu.log" | grep -i "kv\|check" | tail -8
echo "total $(( $(date +%s) - T0 )) s"
