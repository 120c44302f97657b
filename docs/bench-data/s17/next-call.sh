#!/usr/bin/env bash
# Prepared for the next device session (not run: session 17's device time was spent). Two v6 changes
# from the v6 timeline (call 6), each compile-checked (no spills, no wgmma serialisation), one A/B
# per call:
#  - next-v6-pv0-ss.patch: warpgroup 0's P.V from the stored P (SS, after the hand-over barrier)
#    instead of registers (RS), which the timeline measured at ~1,050 cycles a tile against ~560
#    for warpgroup 1's SS one, warpgroup 0 waiting 228 cycles for it at each tile's start;
#  - next-v6-block-barriers.patch: one full barrier per 64-column block of a tile (FlashMLA's
#    arrangement), S starting on each block as it lands, where warpgroup 0 now waits 296 cycles
#    for the whole 72 KB tile at 128 rows.
# Usage (repo root, nvidia-h200, carry .peer .carry), NAME one of the two:
#   cp docs/bench-data/s17/NAME.patch .carry/ && git apply .carry/NAME.patch
#   OUT=$OUT PATCH=.carry/NAME.patch bash docs/bench-data/s17/next-call.sh
# A/B against v6 beside FlashMLA (dc512 suite; the base's outputs checked bit-identical), the decode
# GPU tests, then the timeline of the patched kernel at 128 rows 8K.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=${PATCH:-.carry/next-v6-pv0-ss.patch} TESTS="test_kernels_decode_gpu" SUITES=dc512
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfgtl.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/buildtl.log 2>&1 || { echo "timeline build failed"; exit 1; }
PYTHONPATH=$PWD/tools/mla-bench timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 \
  --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so --heads 128 --s-q 1 --seqlen 8192 --json "$OUT/timeline_patched.json"
echo "call total $(( $(date +%s) - T0 )) s"
