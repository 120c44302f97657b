#!/usr/bin/env bash
# Session 17, call 6 (nvidia-h100-x1 or nvidia-h200): where a tile's time goes in v6, the BF16
# many-head kernel, per warpgroup, from the SM clock (session 16's proposed timeline): the C API
# built with -DMLA_TIMELINE=ON (kernels/timeline.cuh; the default build's SASS is unchanged), then
# tools/mla-bench/timeline.py --kernel v6 (timeline_v6.py when it ran) at 128 rows (s_q 1 and 2) and 64 rows, 8K.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg.log 2>&1 ||
  { tail /tmp/cfg.log; exit 1; }
cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/build.log 2>&1 || { grep -E "error" /tmp/build.log | head; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for shape in "128 1" "64 2" "64 1"; do
  set -- $shape
  timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so \
    --heads "$1" --s-q "$2" --seqlen 8192 --json "$OUT/timeline_h$1_sq$2_l8k.json"
  echo "rc=$? ($(( $(date +%s) - T0 )) s)"
done
