#!/usr/bin/env bash
# Session 14, call 2 (nvidia-h200, carry .peer .carry): the combine in 16-row blocks, the planned
# call and the batched Q loads (.carry/s14a.patch) A/B'd against the tree before them (HEAD
# 551d8ab) in one process beside FlashMLA; the decode, FP8 and 4-bit GPU tests of the new tree;
# FP8 H = 64 / 128 alternated; then where the new tree's call time goes (profile_decode.py).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
export OUT PATCH=.carry/s14a.patch TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu" SUITES=dc512 \
  FP8_ONLY=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H16_sq1_L8k_dc512
bash tools/mla-bench/run_ab_patch_device.sh
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 100 python3 tools/mla-bench/profile_decode.py --bf16-lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --parts 0 \
  --shapes 128:1:4096,128:1:8192,128:2:8192 2>&1 | grep -v Warn | tee "$OUT/prof_new.log"
cd "$OUT" && tar czf call2.tgz *.log *.json 2>/dev/null; ls
