#!/usr/bin/env bash
# Session 21, call 2: the narrow FP8 kernel's timeline (new events, fp8_decode_narrow.cu) on FP4
# pages (the FP4 cache's FP8 route) at probe 0 and 1 (fp4-probe.patch applied: bit 0 skips the
# conversion) and on FP8 pages, H = 16, s_q 1, 8K, B = 128.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/bt -j16 --target mla_kv4_capi mla_fp8_capi >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONUNBUFFERED=1
for pr in 0 1; do
  echo "=== fp4-narrow, MLA_FP4_PROBE=$pr"
  MLA_FP4_PROBE=$pr python3 tools/mla-bench/timeline.py --kernel fp4-narrow --lib /tmp/bt/tools/mla-bench/libmla_kv4_capi.so \
    --heads 16 --json "$OUT/tl_fp4_probe$pr.json" 2>&1 | tail -40
done
echo "=== fp8-narrow"
python3 tools/mla-bench/timeline.py --kernel fp8-narrow --lib /tmp/bt/tools/mla-bench/libmla_fp8_capi.so --heads 16 \
  --json "$OUT/tl_fp8.json" 2>&1 | tail -30
echo "total $(( $(date +%s) - T0 )) s"
