#!/usr/bin/env bash
# Session 18, call 4 (nvidia-h200; carry .peer .carry): the FP8 64-row kernel's softmax with more
# independent work for its one warp per scheduler (fp8-softmax-ilp.patch = .carry/s18s.patch: four
# partial maxima a row, both rows' quad reductions before the divisions; same results bit for bit).
# A/B against the tree before it (FP8 builds alternated, twice each), the FP8 GPU tests, and the
# patched kernel's timeline at H = 128 s_q = 1 8K.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s18s.patch TESTS="test_kernels_fp8_gpu" SUITES=none \
  FP8_ONLY=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512,B128_H64_sq2_L8k_dc512
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-230
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfgtl.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_fp8_capi > /tmp/buildtl.log 2>&1 || { echo "timeline build failed"; exit 1; }
PYTHONPATH=$PWD/tools/mla-bench timeout 60 python3 tools/mla-bench/timeline.py --kernel fp8-rows64 \
  --lib /tmp/btl/tools/mla-bench/libmla_fp8_capi.so --heads 128 --s-q 1 --seqlen 8192 --json "$OUT/tl_fp8_ilp.json" | tail -16
echo "call total $(( $(date +%s) - T0 )) s"
