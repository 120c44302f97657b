#!/usr/bin/env bash
# Session 14, call 12 (nvidia-h200, carry .peer): the order effect of the interleaved timing
# (tools/mla-bench/order_effect.py) at 32K and 8K, with the SM clock and power sampled beside it.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi > "$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
wait
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 \
  > "$OUT/smi.csv" 2>&1 &
SMI=$!
timeout 250 python3 tools/mla-bench/order_effect.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
  --shape 128:1:32768,128:1:8192,128:2:32768 2>&1 | grep -v -i warn | tee "$OUT/order.log"
kill $SMI
awk -F', ' 'NR>1 {print $2, $3, $5}' "$OUT/smi.csv" | sort | uniq -c | sort -rn | head -15
