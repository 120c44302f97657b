#!/usr/bin/env bash
# Session 25, call 1: our FP8 decode beside FlashMLA BF16 dense, FlashMLA FP8 sparse (topk = L) and
# vLLM's FlashMLA dense FP8 (PR #54), issue 11's suite, one process. Carry [".peer"].
# Usage (GPU machine, repo root): OUT=dir bash docs/bench-data/s25/call1.sh
set -uo pipefail
OUT=${OUT:-/tmp/s25}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/smi.txt" 2>&1
echo "start $(date +%T)"
( bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1 &&
  bash tools/mla-bench/peer_vllm_fp8.sh > "$OUT/peer_vllm_fp8.log" 2>&1; echo "peers rc=$? $(date +%T)" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_fp8_capi >> "$OUT/build.log" 2>&1; echo "ours rc=$? $(date +%T)" ) &
wait
tail -3 "$OUT/peer_vllm_fp8.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/.peer/vllm_fp8 PYTHONUNBUFFERED=1
timeout 420 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so \
  --json "$OUT/peer_fp8.json" ${PEER_ARGS:-} 2>&1 | tee "$OUT/peer_fp8.log"
echo "done $(date +%T)"
