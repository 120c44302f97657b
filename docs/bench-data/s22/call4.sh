#!/usr/bin/env bash
# Session 22, call 4: the record of this tree's FP8 and 4-bit decodes. Builds on the device, runs
# the FP8 and 4-bit GPU tests (bit-exact twin checks), verify-decode --kv fp8 / fp4 (FP8 route) on the
# GPU (tiny-v2, tp = 1, Hadamard conversion), then peer_fp8.py (every shape) and peer_kv4.py (issue 12's suite) beside
# FlashMLA 9241ae3 in the same processes.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/smi.txt" 2>&1
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j14 --target test_kernels_fp8_gpu test_kernels_kv4_gpu mla_fp8_capi mla_kv4_capi verify-decode \
    mla-forward mla-calibrate mla-convert >> "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
for t in test_kernels_fp8_gpu test_kernels_kv4_gpu; do
  timeout 200 /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$t.log" | head -8
done
W=/tmp/vd M=datasets/tiny-v2 B=/tmp/b/tools
mkdir -p $W
$B/mla-forward/mla-forward -q capture $M --out $W/cap.h5 --calib docs/math.md --calib-seqs 10 --seq-len 64 \
  --eval docs/math.md --eval-seqs 4 &&
  $B/mla-calibrate/mla-calibrate -q --model $M --activations $W/cap.h5 --pair-sequences 2 --queries 4 --tp 2 \
    -o $W/calib.h5 --json $W/calib.json &&
  $B/mla-convert/mla-convert -q --tp 1 --reparam hadamard --seed 0 -o $W/tp1 $M || echo "tiny-model preparation failed"
V="$B/verify-decode/verify-decode -q --original $M --activations $W/cap.h5 --prefill 40 --decode 16 --sequences 4 --converted $W/tp1"
timeout 90 $V --device cuda --kv fp8 --json "$OUT/vd_tp1_fp8_cuda.json" > "$OUT/vd_tp1_fp8_cuda.log" 2>&1
echo "verify-decode --kv fp8 --device cuda rc=$?"; tail -3 "$OUT/vd_tp1_fp8_cuda.log"
timeout 90 $V --device cuda --kv fp4 --kv4-route fp8 --calib $W/calib.h5 --json "$OUT/vd_tp1_fp4_fp8route_cuda.json" \
  > "$OUT/vd_tp1_fp4_fp8route_cuda.log" 2>&1
echo "verify-decode --kv fp4 --kv4-route fp8 --device cuda rc=$?"; tail -3 "$OUT/vd_tp1_fp4_fp8route_cuda.log"
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 300 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so --json "$OUT/peer_fp8.json" 2>&1 |
  tee "$OUT/peer_fp8.log" | grep -E "^device|^B128|^shape"
timeout 400 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b/tools/mla-bench/libmla_kv4_capi.so --json "$OUT/peer_kv4.json" 2>&1 |
  tee "$OUT/peer_kv4.log" | grep -E "^device|^fp4|^codebook"
echo "total $(( $(date +%s) - T0 )) s"
