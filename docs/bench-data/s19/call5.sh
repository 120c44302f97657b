#!/usr/bin/env bash
# Session 19, call 5 (nvidia-h200): where the seesaw probe's time goes across CTAs. Call 3: the
# probe's CTA (0, 0) pair is v6's in cycles but the call takes 1.17-1.2x v6's; call 4: not a lower
# clock (sustained, the probe ran at a higher clock than v6 and still took 1.2x the cycles). This
# tree's probe records every CTA's start / end (globaltimer) and cycles; timeline.py prints their spread.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/build.log 2>&1 || { grep -E "error|serializ" /tmp/build.log | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for shape in "128 1 32768" "128 1 8192" "64 1 8192"; do
  set -- $shape
  timeout 60 python3 tools/mla-bench/timeline.py --kernel seesaw --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so \
    --heads "$1" --s-q "$2" --seqlen "$3" --json "$OUT/tl_seesaw_h$1_sq$2_l$3.json" 2>&1 | tail -30
done
echo "call total $(( $(date +%s) - T0 )) s"
