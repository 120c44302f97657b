#!/usr/bin/env bash
# Session 19, call 1 (nvidia-h200, carry .peer): FlashMLA's tile by the SM clock (its own timeline
# events, tools/mla-bench/flashmla_timeline.sh) beside v6's ring timeline (the last 1,024 events of
# each warp: session 18's call 6 again on the ring build), same call, same shapes.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
( cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/btl -j4 --target mla_decode_capi > /tmp/build.log 2>&1; echo "v6 build rc=$? $(( $(date +%s) - T0 )) s" > /tmp/v6build.txt ) &
OUT=$OUT bash tools/mla-bench/flashmla_timeline.sh 2>&1 | cut -c1-240
wait; cat /tmp/v6build.txt; grep -E "error|serialized" /tmp/build.log | head
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for shape in "128 1 8192" "128 1 32768" "128 2 8192"; do
  set -- $shape
  timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so \
    --heads "$1" --s-q "$2" --seqlen "$3" --json "$OUT/tl_v6_h$1_sq$2_l$3.json" 2>&1 | tail -18
done
echo "call total $(( $(date +%s) - T0 )) s"
