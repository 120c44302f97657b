#!/usr/bin/env bash
# Session 14, call 3 (nvidia-h200, carry .peer): the record of this session's tree (68ec47a + docs):
# the issue-10 suite beside FlashMLA in one process (ours planned, as FlashMLA is timed), then where
# a 128-row call's time goes with the default parts and with 64 (two whole requests a part, no
# request cut: the new combine's no-split cost) at 4K / 8K / 32K.
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
timeout 330 python3 tools/mla-bench/peer_flashmla.py --lib $L --suite issue10 --json "$OUT/issue10.json" > "$OUT/issue10.log" 2>&1
echo "issue10 rc=$?"; cut -c1-150 "$OUT/issue10.log"
timeout 120 python3 tools/mla-bench/profile_decode.py --bf16-lib $L --parts 0,64 --no-peer \
  --shapes 128:1:4096,128:1:8192,128:1:32768 2>&1 | grep -v -i warn | tee "$OUT/prof_parts.log"
echo "total $(( $(date +%s) - T0 )) s"
