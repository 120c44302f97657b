#!/usr/bin/env bash
# Session 25, call 6: call3.sh's script, unchanged, on the split 64-row FP8 kernel with its copier in
# warp 8, a P.V warp, at the P.V tile start (split-softmax-rows64-copier-in-pv.patch applied to f9e0a3a).
# Usage (GPU machine, repo root, the patch applied): OUT=dir bash docs/bench-data/s25/call6.sh
exec bash "$(dirname "$0")/call3.sh"
