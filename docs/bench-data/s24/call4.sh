#!/usr/bin/env bash
# Session 24, call 4: the fp4-narrow timeline of this tree (14432d6: the FP4 conversion of call 1) at
# H = 16 s_q 1 and H = 32 s_q 1, 8K: why call 1 moved 32 rows (-2%) and not 16.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > "$OUT/tl-build.log" 2>&1 &&
  cmake --build /tmp/bt -j16 --target mla_kv4_capi >> "$OUT/tl-build.log" 2>&1; echo "tl build rc=$? $(( $(date +%s) - T0 )) s"
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for h in 16 32; do
  echo "=== timeline fp4-narrow, this tree, H $h s_q 1 8K"
  timeout 60 python3 tools/mla-bench/timeline.py --kernel fp4-narrow --lib /tmp/bt/tools/mla-bench/libmla_kv4_capi.so --heads $h 2>&1 | tail -30
done
echo "total $(( $(date +%s) - T0 )) s"
