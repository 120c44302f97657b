#!/usr/bin/env bash
# Session 27, call 7 (nvidia-h200): is the timeline's cost to CTA (0, 0) the proxy fence waiting for the events'
# global stores? Session 26's variant D (docs/bench-data/s26/v6-p-before-rs-D.patch: no fence.proxy.async in
# warpgroup 0's loop; warpgroup 1 fences after its acquire) applied to this tree, built with the timeline and
# the spans; CTA (0, 0) against the median CTA at 128 rows 8K and 256 rows 8K (the base: +14-15%, calls 4-5).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
rm -rf /tmp/d-src && mkdir -p /tmp/d-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/d-src -xf -
(cd /tmp/d-src && patch -s -p1 < "$OLDPWD/docs/bench-data/s26/v6-p-before-rs-D.patch") || { echo "patch failed"; exit 1; }
cmake -S /tmp/d-src -B /tmp/td -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /dev/null 2>&1 &&
  cmake --build /tmp/td -j16 --target mla_decode_capi > "$OUT/build_td.log" 2>&1 || { tail "$OUT/build_td.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for sq in 1 2; do
  echo "=== D h128 sq$sq L8192"
  timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/td/tools/mla-bench/libmla_decode_capi.so \
    --heads 128 --s-q $sq --seqlen 8192 --json "$OUT/tl_d_sq$sq.json" 2>&1 | grep -v "behind" | grep -E "CTA|note|period"
done
echo "call total $(( $(date +%s) - T0 )) s"
