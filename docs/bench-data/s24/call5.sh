#!/usr/bin/env bash
# Session 24, call 5: the 64-row kernel's timeline at H = 128 s_q 1 8K on FP4 pages (timeline.py
# --kernel fp4-rows64, new in this tree: event 18 after the P.V warps' conversion share) and on FP8
# pages (fp8-rows64), same call, same shape: where the FP4 route's extra ~30% a tile goes.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > "$OUT/tl-build.log" 2>&1 &&
  cmake --build /tmp/bt -j16 --target mla_kv4_capi mla_fp8_capi >> "$OUT/tl-build.log" 2>&1; echo "tl build rc=$? $(( $(date +%s) - T0 )) s"
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
echo "=== timeline fp4-rows64, H 128 s_q 1 8K"
timeout 60 python3 tools/mla-bench/timeline.py --kernel fp4-rows64 --lib /tmp/bt/tools/mla-bench/libmla_kv4_capi.so --heads 128 2>&1 | tail -30
echo "=== timeline fp8-rows64, H 128 s_q 1 8K"
timeout 60 python3 tools/mla-bench/timeline.py --kernel fp8-rows64 --lib /tmp/bt/tools/mla-bench/libmla_fp8_capi.so --heads 128 2>&1 | tail -30
echo "total $(( $(date +%s) - T0 )) s"
