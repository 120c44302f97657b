#!/usr/bin/env bash
# Session 15, call 4 (nvidia-h200, carry .peer): power, SM clock and time per call of ours
# (planned) and FlashMLA, each back to back for 2.5 s, alternating (tools/mla-bench/power_draw.py):
# does the power cap cost ours more than FlashMLA at the long math-bound shapes?
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 || { tail "$OUT/cfg.log"; exit 1; }
cmake --build /tmp/b -j12 --target mla_decode_capi > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
wait; tail -1 "$OUT/peer.log"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
timeout 150 python3 tools/mla-bench/power_draw.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
  --shape 128:1:32768,128:2:8192,128:1:8192 --seconds 2.5 2>&1 | tee "$OUT/power.log"
