#!/usr/bin/env bash
# Prepared for the next device session (not run: session 18's device time was spent). Session 9's
# FP8 64-row overlap (S of tile i + 1 issued before tile i's softmax, two accumulator sets in turn;
# measured then "no gain", 514 -> 511-518 us) ported to this tree with the timeline events
# (next-fp8-rows64-s-overlap-timeline.patch; through the wgmma guard: no serialisation; 68 bytes of
# spills, in the per-segment query load as in session 9). Call 3 of session 18 puts the tile at
# S ~1,100 + softmax ~1,550 + hand-over ~670 cycles in one chain; with S under the softmax the
# chain should shrink toward softmax + hand-over (~2,200-2,500), unless S then waits for its tile
# or shares the tensor pipe with both P.V k-steps (probe 8's lesson). The timeline says which.
# Usage (repo root, nvidia-h200, carry .peer .carry):
#   cp docs/bench-data/s18/next-fp8-rows64-s-overlap-timeline.patch .carry/ &&
#   git apply .carry/next-fp8-rows64-s-overlap-timeline.patch
#   OUT=$OUT bash docs/bench-data/s18/next-call.sh
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/next-fp8-rows64-s-overlap-timeline.patch TESTS="test_kernels_fp8_gpu" SUITES=none \
  FP8_ONLY=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-230
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfgtl.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_fp8_capi > /tmp/buildtl.log 2>&1 || { echo "timeline build failed"; exit 1; }
PYTHONPATH=$PWD/tools/mla-bench timeout 60 python3 tools/mla-bench/timeline.py --kernel fp8-rows64 \
  --lib /tmp/btl/tools/mla-bench/libmla_fp8_capi.so --heads 128 --s-q 1 --seqlen 8192 --json "$OUT/tl_fp8_overlap.json" | tail -16
echo "call total $(( $(date +%s) - T0 )) s"
