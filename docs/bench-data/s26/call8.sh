#!/usr/bin/env bash
# Session 26, call 8 (nvidia-h200): D (v6-p-before-rs-D.patch) with two probe events in its timeline build
# (the tree's kernels = docs/bench-data/s26/v6-D-probe.patch applied on 4b8c76c): 9 after warpgroup 0
# releases the previous stage, 19 when the next tile's full barrier is already complete before the wait.
# Is D's ~210-cycle "tile landed" step a wait for the copy or on-SM overhead? 128 rows 8K, default and 16
# parts: call7.sh's build and runs on that tree. (Its JSONs were written as tl_d_probe_p64/p16.json.)
SHAPES="128 1 64 16" TAG=tl_d_probe bash "$(dirname "$0")/call7.sh"
