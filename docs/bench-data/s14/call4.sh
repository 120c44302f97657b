#!/usr/bin/env bash
# Session 14, call 4 (nvidia-h200, carry .peer .carry): two whole requests a part when the batch is
# at most twice the slots (.carry/s14b.patch: quant::decode_balanced_parts; B = 128 at 128 rows:
# 64 parts instead of 66) A/B'd against the tree before it in one process beside FlashMLA, the
# whole issue-10 suite (the record); decode and FP8 GPU tests; FP8 H = 128 alternated.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s14b.patch TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu" \
  SUITES=issue10 FP8_ONLY=B128_H128_sq1_L8k_dc512,B128_H64_sq2_L8k_dc512
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-200
