#!/usr/bin/env bash
# Session 25, call 2: the split 64-row FP8 kernel (softmax over two warpgroups): FP8 and 4-bit GPU
# tests (the kv4 test compares the FP4 route, still on the one-softmax kernel, with FP8 pages bit
# for bit), then peer_fp8.py's suite beside FlashMLA BF16, FlashMLA FP8 sparse and vLLM's dense FP8.
# Carry [".peer"]. Usage (GPU machine, repo root): OUT=dir bash docs/bench-data/s25/call2.sh
set -uo pipefail
OUT=${OUT:-/tmp/s25}
mkdir -p "$OUT"
echo "start $(date +%T)"
( bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1 &&
  bash tools/mla-bench/peer_vllm_fp8.sh > "$OUT/peer_vllm_fp8.log" 2>&1; echo "peers rc=$? $(date +%T)" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_fp8_capi test_kernels_fp8_gpu test_kernels_kv4_gpu >> "$OUT/build.log" 2>&1
  echo "ours rc=$? $(date +%T)" ) &
wait
grep -E "error" "$OUT/build.log" | head -20
for t in test_kernels_fp8_gpu test_kernels_kv4_gpu; do
  timeout ${TEST_TIMEOUT:-150} /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1
  echo "$t rc=$? $(date +%T)"
  grep -E "^\[(  PASSED|  FAILED)|Failure|differ|rel_l2 |Which is|Expected" "$OUT/$t.log" | cut -c1-200 | head -30
done
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/.peer/vllm_fp8 PYTHONUNBUFFERED=1
timeout 300 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so \
  --json "$OUT/peer_fp8.json" ${PEER_ARGS:-} 2>&1 | tee "$OUT/peer_fp8.log"
echo "done $(date +%T)"
