#!/usr/bin/env bash
# One device call for the 4-bit caches: builds (on the GPU machine) the GPU tests of the 4-bit
# decode and of the BF16 decode (the memory-bound path's consumer code is shared) and the peer
# library, runs the tests, then ours vs FlashMLA BF16 dense in one process (peer_kv4.py).
# FlashMLA: the git-ignored .peer/ bundle (carry it).
# Usage (GPU machine, repo root): OUT=/some/dir bash tools/mla-bench/run_kv4_device.sh
# KV4_PEER_ARGS passes more arguments to peer_kv4.py (e.g. "--suite quick"); KV4_VERIFY=1 also
# runs verify-decode --kv fp4 | codebook --device cuda on the tiny model (capture, calibration,
# a tp = 1 Hadamard conversion first), per layer (cuda and cpu) and end to end (--perplexity
# --perplexity-path kernel). KV4_ROUTE: the --kv4-route(s) --kv fp4 runs on (default "bf16 fp8",
# both in one call; "bf16" is the old behaviour); codebook runs the bf16 route only. Outputs
# vd_tp1_<kv>_<device>[_ppl] for the bf16 route as before, vd_tp1_fp4_fp8route_<device>[_ppl] for fp8.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
echo "build: $(date +%T)"
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  if [ "${KV4_VERIFY:-0}" = 1 ]; then TOOLS="verify-decode mla-forward mla-calibrate mla-convert"; else TOOLS=""; fi &&
  cmake --build /tmp/b -j16 --target test_kernels_kv4_gpu test_kernels_decode_gpu test_kernels_fp8_gpu mla_kv4_capi $TOOLS \
    >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; }
echo "built: $(date +%T)"
bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1 || echo "peer_unpack failed (see peer_unpack.log)"
for t in test_kernels_kv4_gpu test_kernels_decode_gpu test_kernels_fp8_gpu; do
  timeout 300 /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1
  echo "$t rc=$? ($(date +%T))"
  grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|Failure|differ|Which is|actual|Expected" "$OUT/$t.log" | cut -c1-220 | head -40
done
if [ "${KV4_VERIFY:-0}" = 1 ]; then
  W=/tmp/vd4 M=datasets/tiny-v2 T=/tmp/b/tools
  mkdir -p $W
  $T/mla-forward/mla-forward -q capture $M --out $W/cap.h5 --calib docs/math.md --calib-seqs 10 --seq-len 64 \
    --eval docs/math.md --eval-seqs 4 &&
    $T/mla-calibrate/mla-calibrate -q --model $M --activations $W/cap.h5 --pair-sequences 2 --queries 4 --tp 2 \
      -o $W/calib.h5 --json $W/calib.json &&
    $T/mla-convert/mla-convert -q --tp 1 --reparam hadamard --seed 0 -o $W/tp1 $M || echo "tiny-model preparation failed"
  V="$T/verify-decode/verify-decode -q --original $M --activations $W/cap.h5 --prefill 40 --decode 16 --sequences 4 --converted $W/tp1"
  for run in $(for r in ${KV4_ROUTE:-bf16 fp8}; do echo fp4:$r; done) codebook:bf16; do
    kv=${run%%:*} route=${run#*:}
    tag=$kv; [ "$route" = bf16 ] || tag=${kv}_${route}route
    for dev in cuda cpu; do
      timeout 120 $V --device $dev --kv $kv --kv4-route $route --calib $W/calib.h5 --json "$OUT/vd_tp1_${tag}_${dev}.json" \
        > "$OUT/vd_tp1_${tag}_${dev}.log" 2>&1
      echo "verify-decode --kv $kv --kv4-route $route --device $dev rc=$? ($(date +%T))"; tail -3 "$OUT/vd_tp1_${tag}_${dev}.log"
    done
    timeout 120 $V --device cuda --kv $kv --kv4-route $route --calib $W/calib.h5 --perplexity --perplexity-path kernel 2>&1 |
      tail -3 | tee "$OUT/vd_tp1_${tag}_cuda_ppl.log"
  done
fi
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout ${KV4_PEER_TIMEOUT:-300} python3 tools/mla-bench/peer_kv4.py --lib /tmp/b/tools/mla-bench/libmla_kv4_capi.so \
  --json "$OUT/peer_kv4.json" ${KV4_PEER_ARGS:-} 2>&1 | tee "$OUT/peer_kv4.log"
# The verify-decode outputs in one archive (the device tool returns a limited number of files).
ls "$OUT"/vd_* > /dev/null 2>&1 && tar -C "$OUT" -czf "$OUT/verify_decode_kv4.tar.gz" $(cd "$OUT" && ls vd_*) && rm -f "$OUT"/vd_*
echo "done: $(date +%T)"
