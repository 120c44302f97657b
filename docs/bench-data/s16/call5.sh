#!/usr/bin/env bash
# Session 16, call 5 (nvidia-h200, carry .peer): the record per cycle: FlashMLA's dense decode
# kernel and our split kernel (this tree, v6 unchanged since session 15's record) under Nsight
# Compute's locked clocks on the issue-10 shapes (tools/mla-bench/ncu_cycles.sh).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out}
T0=$(date +%s)
mkdir -p "$OUT"
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_decode_capi >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
wait; tail -1 "$OUT/peer.log"
echo "builds done $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
DEADLINE=$(( 540 - ($(date +%s) - T0) )) bash tools/mla-bench/ncu_cycles.sh 2>&1 | tee "$OUT/call5-ncu_cycles.md"
echo "call total $(( $(date +%s) - T0 )) s"
