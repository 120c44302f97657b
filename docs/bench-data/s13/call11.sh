#!/usr/bin/env bash
# Session 13, call 11 (nvidia-h200, carry .carry .peer): a quarter of the wgmma softmax's exponentials
# on the FMA pipe (ex2_fma: a degree-5 polynomial, .carry/ex2fma.patch) against the tree before it:
# decode GPU tests, then ours / base / FlashMLA in one process (manyhead, dc512).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
OUT=$OUT PATCH=.carry/ex2fma.patch TESTS=test_kernels_decode_gpu SUITES="manyhead dc512" bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | grep -v "^device"
cd "$OUT" && tar czf call11.tgz *.json *.log && rm -f cfg*.log build*.log && ls
