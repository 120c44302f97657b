#!/usr/bin/env bash
# Session 13, call 2 (nvidia-h200, carry .peer): Nsight Compute on v6 as committed in 7a2c699
# (warpgroup 0's P.V from registers) and on FlashMLA at H = 128 s_q = 1 8K (B = 128), with
# per-instruction stall samples (SASS=1), to see where the per-tile chain now waits.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
wait
echo "built $(( $(date +%s) - T0 )) s; $(tail -1 $OUT/peer.log)"
OUT=$OUT SHAPES=h128_sq1_l8k WHO="ours flashmla" SASS=1 bash tools/mla-bench/ncu_decode.sh
cd "$OUT" && gzip -f *_sass.csv && tar czf ncu.tgz *.txt *.csv.gz && ls -la
echo "total $(( $(date +%s) - T0 )) s"
