#!/usr/bin/env bash
# Session 25, call 4: call3.sh's script, unchanged, on the split 64-row FP8 kernel with its copier
# reading each page id a tile ahead (that tree is split-softmax-rows64.patch applied to f9e0a3a).
# Usage (GPU machine, repo root, the patch applied): OUT=dir bash docs/bench-data/s25/call4.sh
exec bash "$(dirname "$0")/call3.sh"
