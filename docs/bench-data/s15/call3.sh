#!/usr/bin/env bash
# Session 15, call 3 (nvidia-h200, carry .peer .carry): the session's record, the whole issue-10
# suite beside FlashMLA in one process, with session 14's tree (the combine before b517bae:
# .carry/s15b.patch reversed) as the base: the combine's effect alone, with paired intervals.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s15b.patch TESTS="" SUITES=issue10
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
