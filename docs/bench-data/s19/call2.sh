#!/usr/bin/env bash
# Session 19, call 2 (nvidia-h200): the seesaw probe of session 16 (effca05: FlashMLA's order and
# hand-offs on our scheduler, per-block reloads by the last user, no producer warp; 0.88-0.90x v6
# then) with clock events at the places of FlashMLA's (call 1), on this tree with
# seesaw-probe-timeline.patch applied (v6's d_c = 512 entry runs the probe; v6_timeline reads its
# events). Same shapes as call 1.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/build.log 2>&1 || { grep -E "error|serializ" /tmp/build.log | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for shape in "128 1 8192" "128 1 32768" "128 2 8192"; do
  set -- $shape
  timeout 60 python3 tools/mla-bench/timeline.py --kernel seesaw --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so \
    --heads "$1" --s-q "$2" --seqlen "$3" --json "$OUT/tl_seesaw_h$1_sq$2_l$3.json" 2>&1 | tail -24
done
echo "call total $(( $(date +%s) - T0 )) s"
