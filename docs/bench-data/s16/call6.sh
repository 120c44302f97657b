#!/usr/bin/env bash
# Session 16, call 6 (nvidia-h200, carry .peer; the machine of call 5 if still warm): power, clock
# and time per call back to back (tools/mla-bench/power_draw.py) at the memory-bound shapes, where
# call 5 found ours 0.91x FlashMLA per cycle at H = 16 s_q = 1 (1.53x its instructions) although
# the peer timing has it 1.00-1.03x: does a serving loop at the power cap see the per-cycle figure?
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
if [ ! -f /tmp/b/tools/mla-bench/libmla_decode_capi.so ] || [ ! -d .peer/flashmla ]; then
  (bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
  cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 || { tail "$OUT/cfg.log"; exit 1; }
  cmake --build /tmp/b -j12 --target mla_decode_capi > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  wait; tail -1 "$OUT/peer.log"
fi
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
timeout 200 python3 tools/mla-bench/power_draw.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
  --shape 16:1:8192,16:1:32768,16:2:8192,64:1:8192 --seconds 2.5 2>&1 | tee "$OUT/call6-power.log"
