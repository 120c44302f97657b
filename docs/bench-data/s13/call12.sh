#!/usr/bin/env bash
# Session 13, call 12 (nvidia-h200, carry .carry .peer): the wgmma softmax's exponent as one FFMA,
# exp2(fma(s, scale log2 e, -m)), the row max taken on the unscaled logits; the twin follows on those
# paths (DecodeTileConfig::fused_logit; .carry/ffma.patch) against the tree before it: decode GPU
# tests, then ours / base / FlashMLA in one process (manyhead, dc512).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
OUT=$OUT PATCH=.carry/ffma.patch TESTS=test_kernels_decode_gpu SUITES="manyhead dc512" bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | grep -v "^device"
cd "$OUT" && tar czf call12.tgz *.json *.log && rm -f cfg*.log build*.log && ls
