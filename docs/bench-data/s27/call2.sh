#!/usr/bin/env bash
# Session 27, call 2 (nvidia-h200, carry .peer .carry): why call 1's change is slower in time with fewer cycles a
# tile: both builds (run_ab_patch_device.sh, SUITES=none), then power_draw.py (each kernel back to back beside
# FlashMLA, nvidia-smi SM clock and power) for the new build and the base at 128 rows 8K, 128 rows 32K and the
# memory-bound 64 rows 8K.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s27dpv.patch SUITES=none TESTS="" bash tools/mla-bench/run_ab_patch_device.sh || exit 1
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
for lib in /tmp/b /tmp/bb; do
  echo "=== $([ $lib = /tmp/b ] && echo new || echo base)"
  timeout 150 python3 tools/mla-bench/power_draw.py --lib $lib/tools/mla-bench/libmla_decode_capi.so \
    --shape 128:1:8192,128:1:32768,64:1:8192 --seconds 2.5 --rounds 1 2>&1 | grep -v "^$"
done
