#!/usr/bin/env bash
# Session 26, call 8 (nvidia-h200, carry .carry): D (v6-p-before-rs-D.patch) with two probe events in its
# timeline build (.carry/s26P.patch = docs/bench-data/s26/v6-D-probe.patch on 4b8c76c): 9 after warpgroup 0
# releases the previous stage, 19 when the next tile's full barrier is already complete before the wait.
# Is D's ~210-cycle "tile landed" step a wait for the copy or on-SM overhead? 128 rows 8K, default and 16 parts.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/tl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /dev/null 2>&1 &&
  cmake --build /tmp/tl -j16 --target mla_decode_capi > "$OUT/build_tl.log" 2>&1 || { tail "$OUT/build_tl.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for parts in 64 16; do
  echo "=== h128 sq1 L8192 parts $parts"
  timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/tl/tools/mla-bench/libmla_decode_capi.so \
    --heads 128 --s-q 1 --seqlen 8192 --parts $parts --json "$OUT/tl_d_probe_p$parts.json" 2>&1 | grep -v "behind" | tail -20
done
echo "call total $(( $(date +%s) - T0 )) s"
