#!/usr/bin/env bash
# Session 19, call 8 (nvidia-h200): where the seesaw probe's loader warps lose ~700 cycles a pair
# (calls 2-6). This tree = seesaw-loader-events.patch: call 6's probe (page ids a pair ahead) with
# events after the rows are formed (21) and after the rope block's TMA reload is issued (22; warp 4:
# 23 loop top, 24 after its reload). One shape, timeline only.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/build.log 2>&1 || { grep -E "error|serializ" /tmp/build.log | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1 timeout 60 python3 tools/mla-bench/timeline.py --kernel seesaw \
  --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so --heads 128 --s-q 1 --seqlen 32768 --json "$OUT/tl_seesaw_events.json" 2>&1 | tail -34
echo "call total $(( $(date +%s) - T0 )) s"
