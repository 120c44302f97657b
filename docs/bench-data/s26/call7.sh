#!/usr/bin/env bash
# Session 26, call 7 (nvidia-h200): v6's period with fewer CTAs streaming. v6 built with -DMLA_TIMELINE=ON;
# timeline.py at 128 rows 8K and 256 rows 8K with the default parts, then with half and a quarter as many
# (parts override: fewer CTAs, so fewer SMs load tiles at once; each CTA's own chain unchanged).
# SHAPES="heads s_q parts..." (;-separated) and TAG (JSON name prefix) for another set (call8.sh).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/tl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /dev/null 2>&1 &&
  cmake --build /tmp/tl -j16 --target mla_decode_capi > "$OUT/build_tl.log" 2>&1 || { tail "$OUT/build_tl.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
IFS=';' read -ra sets <<< "${SHAPES:-128 1 64 32 16;128 2 33 16 8}"
for shape in "${sets[@]}"; do
  set -- $shape
  for parts in "${@:3}"; do
    echo "=== h$1 sq$2 L8192 parts $parts"
    timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/tl/tools/mla-bench/libmla_decode_capi.so \
      --heads "$1" --s-q "$2" --seqlen 8192 --parts $parts --json "$OUT/${TAG:-tl}_h$1_sq$2_p$parts.json" 2>&1 |
      grep -v "behind" | tail -20
  done
done
echo "call total $(( $(date +%s) - T0 )) s"
