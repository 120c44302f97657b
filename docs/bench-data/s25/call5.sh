#!/usr/bin/env bash
# Session 25, call 5: the final tree (kernels as session 24's) beside FlashMLA BF16, its FP8 sparse
# kernel and vLLM's dense FP8, issue 11's suite again (a second process: the vLLM comparison
# replicated; peer_fp8.py after its optional-peer refactor). Carry [".peer"].
# Usage (GPU machine, repo root): OUT=dir bash docs/bench-data/s25/call5.sh
set -uo pipefail
OUT=${OUT:-/tmp/s25}
mkdir -p "$OUT"
echo "start $(date +%T)"
( bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1 &&
  bash tools/mla-bench/peer_vllm_fp8.sh > "$OUT/peer_vllm_fp8.log" 2>&1; echo "peers rc=$? $(date +%T)" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_fp8_capi >> "$OUT/build.log" 2>&1; echo "ours rc=$? $(date +%T)" ) &
wait
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/.peer/vllm_fp8 PYTHONUNBUFFERED=1
timeout 300 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so \
  --json "$OUT/peer_fp8.json" 2>&1 | tee "$OUT/peer_fp8.log"
echo "done $(date +%T)"
