#!/usr/bin/env bash
# Session 25, call 8: the review's tool changes on the GPU: peer_vllm_fp8.sh twice (a build, then the
# import check that skips it), peer_fp8.py on two shapes. Carry [".peer"].
# Usage (GPU machine, repo root): OUT=dir bash docs/bench-data/s25/call8.sh
set -uo pipefail
OUT=${OUT:-/tmp/s25}
mkdir -p "$OUT"
( bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1 &&
  bash tools/mla-bench/peer_vllm_fp8.sh > "$OUT/peer_vllm_fp8.log" 2>&1; echo "peers rc=$? $(date +%T)";
  bash tools/mla-bench/peer_vllm_fp8.sh; echo "second peer_vllm_fp8.sh rc=$? $(date +%T) (no build: nothing printed)" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_fp8_capi >> "$OUT/build.log" 2>&1; echo "ours rc=$? $(date +%T)" ) &
wait
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/.peer/vllm_fp8 PYTHONUNBUFFERED=1
timeout 120 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so \
  --only B128_H16_sq1_L8k_dc512,B128_H128_sq1_L8k_dc512 2>&1 | tee "$OUT/peer_fp8.log"
