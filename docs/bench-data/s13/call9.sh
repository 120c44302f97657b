#!/usr/bin/env bash
# Session 13, call 9 (nvidia-h200): mla-bench --kv at the shapes whose BF16 baseline this session
# changed (> 16 rows: v6 / v7), so docs/python.md's "speed vs our BF16 decode" column is current.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla-bench >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
B=/tmp/b/tools/mla-bench/mla-bench
run() { local n=$1; shift; timeout 120 $B --runs 30 "$@" --json "$OUT/kvb_$n.json" > "$OUT/kvb_$n.txt" 2>&1
        echo "== $n rc=$?: $*"; grep -E "^ceilings|^  " "$OUT/kvb_$n.txt"; }
for H in 64 128; do
  run fp8_h$H --kv fp8 --heads $H --seqlen 8192
  run fp4_h$H --kv fp4 --heads $H --seqlen 8192
done
run fp8_h128_dc256 --kv fp8 --heads 128 --dc 256 --seqlen 8192
cd "$OUT" && tar czf kvb9.tar.gz kvb_* && echo "total $(( $(date +%s) - T0 )) s"
