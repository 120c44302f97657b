#!/usr/bin/env bash
# Session 11, call 6 (nvidia-h200-x2 or nvidia-h100-x2, two GPUs, NCCL): TPLA ranks on their own
# GPUs with quantised caches (verify-decode --devices 2 --kv fp8|fp4|codebook): the GPU test,
# then the CLI on tiny-v2 (capture, calibration, conversions), per layer and end to end.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader; nvidia-smi topo -m | head -4
export NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target test_multi_device_gpu verify-decode mla-forward mla-calibrate mla-convert \
    >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
grep -i "nccl" "$OUT/build.log" | head -2
echo "built $(( $(date +%s) - T0 )) s"
timeout 300 /tmp/b/tests/verify/test_multi_device_gpu > "$OUT/test_multi_device_gpu.log" 2>&1
echo "test_multi_device_gpu rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|\[figure\]|Failure" "$OUT/test_multi_device_gpu.log" | head -30
W=/tmp/w M=datasets/tiny-v2 T=/tmp/b/tools
mkdir -p $W
$T/mla-forward/mla-forward -q capture $M --out $W/cap.h5 --calib docs/math.md --calib-seqs 10 --seq-len 64 \
  --eval docs/math.md --eval-seqs 4 &&
  $T/mla-calibrate/mla-calibrate -q --model $M --activations $W/cap.h5 --pair-sequences 2 --queries 4 --tp 2 -o $W/calib.h5 &&
  $T/mla-convert/mla-convert -q --tp 2 --groups 1 --reparam hadamard --seed 0 -o $W/tp2g1 $M &&
  $T/mla-convert/mla-convert -q --tp 2 --reparam pca --calib $W/calib.h5 --kv-cache fp4 -o $W/tp2fp4 $M &&
  $T/mla-convert/mla-convert -q --tp 2 --groups 1 --reparam pca --calib $W/calib.h5 --kv-cache fp4 -o $W/tp2g1fp4 $M ||
  { echo "tiny-model preparation failed"; exit 1; }
echo "prepared $(( $(date +%s) - T0 )) s"
V="$T/verify-decode/verify-decode -q --original $M --activations $W/cap.h5 --prefill 40 --decode 16 --sequences 4 --device cuda --devices 2"
vd() {  # name, args
  local n=$1; shift
  timeout 120 $V "$@" --json "$OUT/vd_$n.json" > "$OUT/vd_$n.log" 2>&1
  echo "== $n rc=$? ($(( $(date +%s) - T0 )) s): $*"; grep -E "TPLA ranks|PASS|FAIL|bits/byte|agreement" "$OUT/vd_$n.log" | head -6
}
vd fp8_tp2g1 --converted $W/tp2g1 --kv fp8
vd fp8_tp2g1_ppl --converted $W/tp2g1 --kv fp8 --perplexity --perplexity-path kernel
vd fp4_tp2 --converted $W/tp2fp4 --kv fp4 --max-rel-l2 1 --max-cos-diff 1
vd codebook_tp2 --converted $W/tp2fp4 --kv codebook --calib $W/calib.h5 --max-rel-l2 1 --max-cos-diff 1
vd fp4_tp2g1_fp8route --converted $W/tp2g1fp4 --kv fp4 --kv4-route fp8 --max-rel-l2 1 --max-cos-diff 1
vd fp4_tp2g1_fp8route_ppl --converted $W/tp2g1fp4 --kv fp4 --kv4-route fp8 --perplexity --perplexity-path kernel
vd fp8_tp2g2_refused --converted $W/tp2fp4 --kv fp8
tar -C "$OUT" -czf "$OUT/vd.tar.gz" $(cd "$OUT" && ls vd_*) && rm -f "$OUT"/vd_*
echo "total $(( $(date +%s) - T0 )) s"
