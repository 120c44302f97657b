#!/usr/bin/env bash
# Session 16, call 4 (nvidia-h200, carry .peer .carry): a speed probe, not a candidate: the seesaw
# with warpgroup 1 in FlashMLA's order (its own tile's P.V first, O_R scaled by both factors first,
# P_A not pre-scaled, so exact only where B's factors are 1; its next S on its own half of the
# buffer first; .carry/s16d.patch) against v6, beside FlashMLA (dc512 suite). Question: is the
# twin's order what kept the seesaw 15% behind v6?
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/s16d.patch TESTS="" SUITES=none
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-260
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PF="python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so"
timeout 90 $PF --only h128_sq1_l8k --runs 3 --warmup 1 --no-ceilings 2>&1 | tail -1
rc=$?; echo "sanity rc=$rc ($(( $(date +%s) - T0 )) s)"
[ $rc -eq 0 ] || { echo "sanity failed: stop"; exit 1; }
timeout 200 $PF --suite dc512 --json "$OUT/ab_dc512.json" 2>&1 | tail -6
echo "call total $(( $(date +%s) - T0 )) s"
