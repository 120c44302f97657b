#!/usr/bin/env bash
# session 9 call 2: which piece bounds the 64-row FP8 kernel (H = 64 / 128)? Variants (results wrong,
# timing only): 0 as built, 1 no O rescale, 2 no V^T fragment build (constant fragments), 3 no softmax
# (warpgroup 0), 4 no P.V wgmmas (fragments still built), 5 no S wgmmas.
set -uo pipefail
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d .peer/flashmla/build ] || (bash tools/mla-bench/peer_unpack.sh > $OUT/peer.log 2>&1) &
patch -s -p1 < docs/bench-data/decode-ii-s9/call2-exp.patch || { echo "patch failed"; exit 1; }
for e in 0 1 2 3 4 5; do
  cmake -S . -B /tmp/e$e -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DCMAKE_CUDA_FLAGS=-DMLA_EXP=$e > $OUT/cfg$e.log 2>&1 || { tail $OUT/cfg$e.log; exit 1; }
  (cmake --build /tmp/e$e -j3 --target mla_fp8_capi > $OUT/build$e.log 2>&1 || echo "build $e failed") &
done
wait
echo "builds $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
S=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512
for rep in 1 2; do
  for e in 0 1 2 3 4 5; do
    [ $(( $(date +%s) - T0 )) -gt 540 ] && { echo "out of time"; break 2; }
    echo "=== variant $e rep $rep"
    timeout 100 python3 tools/mla-bench/peer_fp8.py --lib /tmp/e$e/tools/mla-bench/libmla_fp8_capi.so --only $S --runs 10 2>&1 | grep "^B128" | cut -c1-80
  done
done 2>&1 | tee $OUT/exp.txt
echo "total $(( $(date +%s) - T0 )) s"
