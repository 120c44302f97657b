#!/usr/bin/env bash
# Session 18, call 2 (nvidia-h200; carry .peer .carry): session 17's per-block barriers again, now
# without the wgmma serialisation that made call 1's S 2.7x slower (ptxas C7520: the per-block
# mbarrier wait's predicated back edge between two wgmmas is a divergent path; the new
# mbar_wait_uniform votes and branches bra.uni). The tree carries the change
# (v6-block-barriers-uniform-wait.patch = .carry/s18b.patch): A/B against v6 beside FlashMLA (dc512),
# the decode GPU tests, the patched kernel's timeline at 128 rows 8K.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s18b.patch bash docs/bench-data/s17/next-call.sh
