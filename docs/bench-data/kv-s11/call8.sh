#!/usr/bin/env bash
# Session 11, call 8 (nvidia-h200): mla-bench --kv with the planned FP8 routes beside the
# self-scheduling ones. Written before: at <= 32 query rows a planned decode is the split kernel
# alone (no prologue launch), so ~3-8 us less a call at 8K (gpu-notes "A planned FP8 decode in
# one launch": 197 -> 190 us at H = 16 8K with the fused merge); above 32 rows the prologue still
# quantises the query, so ~1-3 us.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla-bench >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
B=/tmp/b/tools/mla-bench/mla-bench
for args in "--kv fp8 --heads 16 --seqlen 8192" "--kv fp8 --heads 16 --seqlen 32768" "--kv fp8 --heads 16 --sq 2 --seqlen 8192" \
            "--kv fp8 --heads 128 --seqlen 8192" "--kv fp4 --heads 16 --seqlen 8192" "--kv fp4 --heads 128 --seqlen 8192"; do
  n=$(echo "$args" | tr -d '-' | tr ' ' '_')
  timeout 120 $B --runs 30 $args --json "$OUT/kvb8_$n.json" > "$OUT/kvb8_$n.txt" 2>&1
  echo "== rc=$?: $args"; grep -E "^ceilings|^  " "$OUT/kvb8_$n.txt"
done
tar -C "$OUT" -czf "$OUT/kvb8.tar.gz" $(cd "$OUT" && ls kvb8_*) && rm -f "$OUT"/kvb8_*
echo "total $(( $(date +%s) - T0 )) s"
