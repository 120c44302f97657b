#!/usr/bin/env bash
# One device call for the FP8 KV cache: the GPU tests (append/quantisation bit-exact, decode vs
# twin and float64), verify-decode --kv fp8 on the GPU for the tiny model (per layer and end to
# end), then ours vs FlashMLA BF16 dense and FP8 sparse in one process (peer_fp8.py).
# Binaries: those in $FP8_BIN (built on the development machine and carried) when they run
# here, else built here. FlashMLA: the git-ignored .peer/flashmla (carry it).
# Usage (GPU machine, repo root): OUT=/some/dir FP8_BIN=build-fp8carry bash tools/mla-bench/run_fp8_device.sh
# FP8_VERIFY=0 skips verify-decode (and builds only the test and the peer library); FP8_PEER_ARGS
# passes more arguments to peer_fp8.py (e.g. "--only B128_H16_sq1_L8k_dc512 --runs 10").
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
BIN=${FP8_BIN:-build-fp8carry}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
if ! "$BIN/test_kernels_fp8_gpu" --gtest_list_tests > /dev/null 2>&1 || ! "$BIN/verify-decode" --help > /dev/null 2>&1; then
  echo "carried binaries do not run here: building ($(date +%T))"
  cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
    if [ "${FP8_VERIFY:-1}" = 1 ]; then TOOLS="verify-decode mla-forward mla-convert"; else TOOLS=""; fi
    cmake --build /tmp/b -j16 --target test_kernels_fp8_gpu mla_fp8_capi $TOOLS \
      >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; }
  BIN=/tmp/fp8bin
  mkdir -p $BIN
  cp /tmp/b/tests/kernels/test_kernels_fp8_gpu /tmp/b/tools/mla-bench/libmla_fp8_capi.so $BIN/
  [ -z "$TOOLS" ] || cp /tmp/b/tools/verify-decode/verify-decode /tmp/b/tools/mla-forward/mla-forward \
    /tmp/b/tools/mla-convert/mla-convert $BIN/
fi
echo "binaries ready: $(date +%T)"
timeout 200 "$BIN/test_kernels_fp8_gpu" > "$OUT/fp8_gpu_test.log" 2>&1
echo "gpu test rc=$? ($(date +%T))"
grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|gpu-vs|Failure|first differing|rel_l2|Which is|actual" "$OUT/fp8_gpu_test.log" | cut -c1-220 | head -70
if [ "${FP8_VERIFY:-1}" = 1 ]; then
W=/tmp/vd
M=datasets/tiny-v2
mkdir -p $W
"$BIN/mla-forward" -q capture $M --out $W/cap.h5 --eval docs/math.md --eval-seqs 4 --seq-len 80 &&
  "$BIN/mla-convert" -q --tp 1 -o $W/tp1 $M || echo "tiny-model preparation failed"
V="$BIN/verify-decode -q --original $M --activations $W/cap.h5 --prefill 48 --decode 16 --sequences 4 --converted $W/tp1"
timeout 60 $V --device cuda --kv fp8 --json "$OUT/vd_tp1_fp8_cuda.json" 2>&1 | tee "$OUT/vd_tp1_fp8_cuda.log"
echo "verify-decode --kv fp8 --device cuda rc=${PIPESTATUS[0]} ($(date +%T))"
timeout 60 $V --device cuda --kv fp8 --perplexity --perplexity-path kernel 2>&1 | tail -4 | tee "$OUT/vd_tp1_fp8_cuda_ppl.log"
fi
bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1 || echo "peer_unpack failed (see peer_unpack.log)"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout ${FP8_PEER_TIMEOUT:-300} python3 tools/mla-bench/peer_fp8.py --lib "$BIN/libmla_fp8_capi.so" --json "$OUT/peer_fp8.json" ${FP8_PEER_ARGS:-} 2>&1 |
  tee "$OUT/peer_fp8.log"
echo "done: $(date +%T)"
