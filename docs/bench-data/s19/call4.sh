#!/usr/bin/env bash
# Session 19, call 4 (nvidia-h200, carry .peer .carry): is the seesaw probe's 0.85x (call 3) a lower
# SM clock? CTA (0, 0)'s pair is v6's in cycles, so at the measured times the probe's implied clock
# is ~1.5-1.66 GHz against v6's and FlashMLA's 1.85-1.97. power_draw.py (nvidia-smi every 100 ms)
# on v6 (the tree before the patch) and the probe (this tree), each beside FlashMLA.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
OUT=/tmp/about PATCH=.carry/seesaw-rows-ahead.patch TESTS="" SUITES=none bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | tail -3
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
for l in bb b; do
  echo "=== $([ $l = bb ] && echo 'v6 (base)' || echo 'seesaw probe')"
  timeout 100 python3 tools/mla-bench/power_draw.py --lib /tmp/$l/tools/mla-bench/libmla_decode_capi.so \
    --shape 128:1:32768,128:1:8192 --seconds 2 --rounds 1 2>&1 | tail -12 | tee -a "$OUT/power.log"
done
