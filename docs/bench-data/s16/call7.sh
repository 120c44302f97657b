#!/usr/bin/env bash
# Session 16, call 7 (nvidia-h200, carry .peer .carry): the 16-row (memory-bound) path's
# exponentials by ex2.approx.ftz instead of exp2f (.carry/s16e.patch) against the tree before it:
# decode GPU tests; peer timing (new, base, FlashMLA interleaved) at the 16-row shapes; cycles at
# locked clocks (ncu_cycles.sh, new and base); power, clock and time back to back at the power cap
# (power_draw.py, new and base).
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s16e.patch TESTS="test_kernels_decode_gpu" SUITES=none
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PF="python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so --no-ceilings"
for s in h16_sq1_l4k h16_sq1_l8k h16_sq1_l32k; do timeout 60 $PF --only $s --json "$OUT/ab_$s.json" 2>&1 | tail -1; done
echo "timing done $(( $(date +%s) - T0 )) s"
for lib in b bb; do
  echo "=== cycles: $([ $lib = b ] && echo new || echo base)"
  OUT=$OUT/$lib LIB=/tmp/$lib/tools/mla-bench/libmla_decode_capi.so SHAPES="h16_sq1_l8k h16_sq1_l32k" \
    bash tools/mla-bench/ncu_cycles.sh 2>&1 | grep -E "^\| h16|ncu_cycles:"
done
for lib in b bb; do
  echo "=== power: $([ $lib = b ] && echo new || echo base)"
  timeout 100 python3 tools/mla-bench/power_draw.py --lib /tmp/$lib/tools/mla-bench/libmla_decode_capi.so \
    --shape 16:1:8192,16:1:32768 --seconds 2.5 2>&1 | grep -E "round|ceilings"
done
echo "call total $(( $(date +%s) - T0 )) s"
