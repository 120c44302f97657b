#!/usr/bin/env bash
# Session 14, call 5 (nvidia-h200, carry .peer): the per-request (segment) constant, ours vs
# FlashMLA: B x L = 128 x 4096 tokens split into 128..1024 requests, whole requests a part
# (tools/mla-bench/segment_cost.py), at 128 rows, 256 rows and 16 rows.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
L=/tmp/b/tools/mla-bench/libmla_decode_capi.so
{ timeout 150 python3 tools/mla-bench/segment_cost.py --lib $L --heads 128 --parts 64
  timeout 150 python3 tools/mla-bench/segment_cost.py --lib $L --heads 128 --s-q 2 --parts 32 --batches 128,256,512
  timeout 100 python3 tools/mla-bench/segment_cost.py --lib $L --heads 16 --parts 256 --batches 256,512,1024; } 2>&1 |
  grep -v -i warn | tee "$OUT/segment_cost.log"
echo "total $(( $(date +%s) - T0 )) s"
