#!/usr/bin/env bash
# Makes .peer/vllm-fp8-src.tar.xz: the FP8 *dense* MLA decode kernel for sm_90 that vLLM's fork of
# FlashMLA carries (vllm-project/FlashMLA, csrc/extension/sm90/dense_fp8: FlashMLA PR #54 by
# @endurehero, never merged upstream; E4M3 query and cache, 576 B a token, one scale per tensor),
# a second public peer for our FP8 decode beside FlashMLA's BF16 dense and FP8 sparse kernels.
# Only its own sources go in (the dense_fp8 folder and csrc/params.h, ~60 KB); it is compiled
# against the CUTLASS of the FlashMLA bundle (peer_bundle.sh), by peer_vllm_fp8.sh on the GPU
# machine. Nothing of it is committed: .peer/ is git-ignored and carried to the device.
# Usage (repo root): bash tools/mla-bench/peer_bundle_vllm_fp8.sh [VLLM_FLASHMLA_GIT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${1:-/work/.mirror/vllm-project+FlashMLA/repo}
COMMIT=${VLLM_FLASHMLA_COMMIT:-46d64a8}   # the commit the recorded figures used
git -C "$SRC" rev-parse --git-dir > /dev/null 2>&1 || { echo "not a git directory: $SRC (fetch vllm-project/FlashMLA first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/peer-vllm-fp8-src"
git -C "$SRC" archive "$COMMIT" csrc/params.h csrc/extension/sm90/dense_fp8 | tar -x -C "$tmp/peer-vllm-fp8-src"
echo "vllm-project/FlashMLA $(git -C "$SRC" rev-parse "$COMMIT")" > "$tmp/peer-vllm-fp8-src/PEER_COMMITS"
mkdir -p .peer
tar -C "$tmp" -cf - peer-vllm-fp8-src | xz -T0 -6 > "$tmp/bundle.tar.xz"
mv "$tmp/bundle.tar.xz" .peer/vllm-fp8-src.tar.xz
echo "wrote .peer/vllm-fp8-src.tar.xz ($(du -h .peer/vllm-fp8-src.tar.xz | cut -f1)): $(cat "$tmp/peer-vllm-fp8-src/PEER_COMMITS")"
