#!/usr/bin/env bash
# Prepared for the next device session (not run). The seesaw kernel made exact and opt-in
# (next-seesaw-exact.patch: variant 8 at d_c = 512, d_r = 64; the twin's pair mode, P_A sent to
# warpgroup 1 as bf16(P_A * a_B) after B's factors, FlashMLA's order; the rows in the loader warps'
# lanes of next-seesaw-page-ids-in-lanes.patch; CPU test DecodeTwin.SeesawPairsChangeOnlyRounding;
# GPU tests: the many-head cases, the cut-request merges and the bad page on variant 8 against the pair
# twin). One build: the decode GPU tests, then variant 8 against variant 0 (v6) and FlashMLA in one
# process (peer_flashmla.py --variant 8 --base-variant 0, the same library as base), the seesaw's
# timeline at 128 rows 32K (v6_timeline reads the seesaw's events in this patch), and energy per call.
# Usage (repo root, nvidia-h200, carry .peer):
#   git apply docs/bench-data/s19/next-seesaw-exact.patch && OUT=$OUT bash docs/bench-data/s19/next-call-exact.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > /tmp/peer.log 2>&1; echo "peer rc=$?" >> /tmp/peer.log) &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_decode_capi test_kernels_decode_gpu > /tmp/build.log 2>&1 ||
  { grep -E "error|serializ" /tmp/build.log | head; exit 1; }
(cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfgtl.log 2>&1 &&
  cmake --build /tmp/btl -j4 --target mla_decode_capi > /tmp/buildtl.log 2>&1; echo "timeline build rc=$?" > /tmp/tl.rc) &
echo "built $(( $(date +%s) - T0 )) s"
timeout 240 /tmp/b/tests/kernels/test_kernels_decode_gpu > "$OUT/test_kernels_decode_gpu.log" 2>&1; echo "decode GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Seesaw" "$OUT/test_kernels_decode_gpu.log" | head -12
wait; tail -1 /tmp/peer.log; cat /tmp/tl.rc
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/tools/mla-bench PYTHONUNBUFFERED=1
L=/tmp/b/tools/mla-bench/libmla_decode_capi.so
timeout 300 python3 tools/mla-bench/peer_flashmla.py --lib $L --base-lib $L --variant 8 --base-variant 0 --suite dc512 \
  --json "$OUT/ab_dc512.json" 2>&1 | cut -c1-420
timeout 60 python3 tools/mla-bench/timeline.py --kernel seesaw --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so \
  --heads 128 --s-q 1 --seqlen 32768 --json "$OUT/tl_seesaw.json" 2>&1 | tail -34
for v in 0 8; do  # energy per call at the 700 W cap, each beside FlashMLA (session 19, call 4)
  echo "=== power: variant $v"
  timeout 60 python3 tools/mla-bench/power_draw.py --lib $L --variant $v --shape 128:1:32768 --seconds 2 --rounds 1 2>&1 | tail -3
done
echo "call total $(( $(date +%s) - T0 )) s"
