#!/usr/bin/env bash
# Session 13, call 7 (nvidia-h200, carry .carry .peer): the wgmma paths' running max with a slack of 8
# (log2 units; the twin follows: quant::DecodeTileConfig::max_slack), so most tiles keep alpha = 1 and
# skip the O rescale (.carry/slack.patch, the tree's uncommitted change), against the tree before it:
# decode GPU tests (GPU vs the twin with the same rule), then ours / base / FlashMLA in one process.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
OUT=$OUT PATCH=.carry/slack.patch TESTS=test_kernels_decode_gpu SUITES="manyhead dc512" bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | grep -v "^device"
cd "$OUT" && tar czf call7.tgz *.json *.log && rm -f cfg*.log build*.log && ls
