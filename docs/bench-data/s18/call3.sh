#!/usr/bin/env bash
# Session 18, call 3 (nvidia-h200; carry .peer): why the FP8 64-row kernel's softmax takes ~1,556
# cycles a tile (call 1's timeline, H100) against ~525 in session 17's wide kernel. The tree carries
# compile-time probes in kernels/fp8_decode_rows64.cu (fp8-rows64-probes.patch; MLA_FP8_PROBE,
# results wrong except 0 and 8): 1 no P.V wgmmas, 2 no V^T fragments, 4 no O rescale (warpgroups
# 1-2), 7 all three; 8 (correct) both k-steps' V^T fragments before P8, the stage released then,
# both P.V issued at once. Timeline builds of each at H = 128 s_q = 1 8K; FP8 GPU tests of 8;
# peer_fp8 of 0 and 8 (timeline builds both) alternated.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "($(( $(date +%s) - T0 )) s)"; }
(bash tools/mla-bench/peer_unpack.sh > /tmp/peer.log 2>&1; echo "peer rc=$?" >> /tmp/peer.log) &
pids=()
for P in 0 1 2 4 7 8; do
  cmake -S . -B /tmp/p$P -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON \
    -DCMAKE_CUDA_FLAGS="-DMLA_FP8_PROBE=$P" > /tmp/cfg$P.log 2>&1 || { tail /tmp/cfg$P.log; exit 1; }
  T="mla_fp8_capi"; [ $P = 8 ] && T="$T test_kernels_fp8_gpu"
  cmake --build /tmp/p$P -j3 --target $T > /tmp/build$P.log 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait $p || { echo "a build failed"; grep -h -E "error" /tmp/build*.log | head; exit 1; }; done
echo "builds done $(el)"
timeout 150 /tmp/p8/tests/kernels/test_kernels_fp8_gpu > "$OUT/fp8_gpu_test_p8.log" 2>&1
rc=$?; echo "test_kernels_fp8_gpu (probe 8) rc=$rc $(el)"
grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]" "$OUT/fp8_gpu_test_p8.log" | head -12
[ $rc -eq 124 ] && { echo "tests timed out: a hang"; exit 1; }
export PYTHONPATH=$PWD/tools/mla-bench${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for P in 0 1 2 4 7 8; do
  echo "=== timeline probe $P"
  timeout 60 python3 tools/mla-bench/timeline.py --kernel fp8-rows64 --lib /tmp/p$P/tools/mla-bench/libmla_fp8_capi.so \
    --heads 128 --s-q 1 --seqlen 8192 --json "$OUT/tl_p$P.json" 2>&1 | tail -16
done
echo "timelines $(el)"
wait; tail -1 /tmp/peer.log
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PYTHONPATH
SH=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512
for P in 8 0 8 0; do
  echo "=== FP8 probe $P $(el)"
  timeout 100 python3 tools/mla-bench/peer_fp8.py --lib /tmp/p$P/tools/mla-bench/libmla_fp8_capi.so --only "$SH" --runs 10 2>&1 |
    grep -v "^device" | cut -c1-200
done
echo "call total $(el)"
