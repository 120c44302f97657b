#!/usr/bin/env bash
# Session 13, call 4 (nvidia-h200, carry .carry .peer): v6 publishes the tile's row factors (alpha)
# right after the row max (named barrier 6), both warpgroups rescale O while warpgroup 0 computes the
# exponentials (.carry/early-alpha.patch, the tree's uncommitted change), against the tree before it:
# decode GPU tests, then ours / base / FlashMLA in one process (manyhead, then dc512).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
OUT=$OUT PATCH=.carry/early-alpha.patch TESTS=test_kernels_decode_gpu SUITES="manyhead dc512" bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | grep -v "^device"
cd "$OUT" && tar czf call4.tgz *.json *.log && rm -f cfg*.log build*.log && ls
