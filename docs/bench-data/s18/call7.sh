#!/usr/bin/env bash
# Session 18, call 7 (nvidia-h200; no carry): call 6 again with the timeline a ring (a warp's last 1,024 events: the end of the run, not its start): where v6 loses to FlashMLA on the H200 (calls 2:
# 0.92-0.94x at 128 rows 32K and at 256 rows 8K, 1.00x at 128 rows 8K): v6's clock timeline at
# 128 rows 8K and 32K and at 256 rows 8K, same build, same call. A longer "tile landed" wait at 32K
# would put the deficit on the memory side (page walks over 4.8 GB of cache), a longer S or P.V on
# the tensor side.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/build.log 2>&1 || { grep error /tmp/build.log | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for shape in "128 1 8192" "128 1 32768" "128 2 8192"; do
  set -- $shape
  timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so \
    --heads "$1" --s-q "$2" --seqlen "$3" --json "$OUT/tl_h$1_sq$2_l$3.json" 2>&1 | tail -18
done
echo "call total $(( $(date +%s) - T0 )) s"
