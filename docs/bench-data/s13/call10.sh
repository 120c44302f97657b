#!/usr/bin/env bash
# Session 13, call 10 (nvidia-h200, carry .carry .peer): v6's warpgroup 0 stores P for warpgroup 1
# with four stmatrix.x4 instead of sixteen st.shared.b32 (.carry/stsm.patch, the same bytes): decode
# GPU tests, then ours / base / FlashMLA in one process over the d_c = 512 suite.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
OUT=$OUT PATCH=.carry/stsm.patch TESTS=test_kernels_decode_gpu SUITES="dc512" bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | grep -v "^device"
cd "$OUT" && tar czf call10.tgz *.json *.log && rm -f cfg*.log build*.log && ls
