#!/usr/bin/env bash
# Session 14, call 1 (nvidia-h200, carry .peer): where a BF16 many-head call's time goes beside
# FlashMLA's (torch.profiler: scheduler, split kernel, combine, gaps), default parts and a
# divisor of the batch, at 128 rows (4K / 8K / 32K) and 256 rows (8K); FP8 H = 128 the same way.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi mla_fp8_capi > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
L=/tmp/b/tools/mla-bench
timeout 200 python3 tools/mla-bench/profile_decode.py --bf16-lib $L/libmla_decode_capi.so --parts 0,64 \
  --shapes 128:1:4096,128:1:8192,128:1:32768,64:2:4096 2>&1 | tee "$OUT/prof_bf16_sq1.log"
timeout 100 python3 tools/mla-bench/profile_decode.py --bf16-lib $L/libmla_decode_capi.so --parts 0,32 \
  --shapes 128:2:4096,128:2:8192 2>&1 | tee "$OUT/prof_bf16_sq2.log"
timeout 100 python3 tools/mla-bench/profile_decode.py --fp8-lib $L/libmla_fp8_capi.so --parts 0 --no-peer \
  --shapes 128:1:4096,128:1:8192 2>&1 | tee "$OUT/prof_fp8.log"
echo "total $(( $(date +%s) - T0 )) s"
