#!/usr/bin/env bash
# Prepared for the next device session (not run: session 19's device time was spent). The seesaw probe
# (FlashMLA's order on our scheduler: not twin-exact, exact only where B's factors are 1) with the cache
# rows of the next pairs held 32 tiles at a time in the lanes of each loader warp (page ids loaded 16
# pairs ahead, rows formed once a chunk) and taken by shuffles, so the loader thread no longer loads,
# divides or reads kernel parameters a pair (calls 2-8 of session 19: ~1,000 cycles a pair on each
# warpgroup). Against v6 and FlashMLA in one process, the decode GPU tests,
# then the probe's timeline (with every CTA's span) at 128 rows 32K, then energy per call
# at the power cap (v6 and the probe, each beside FlashMLA). ~6-7 device minutes.
# Usage (repo root, nvidia-h200, carry .peer .carry):
#   git apply docs/bench-data/s19/next-seesaw-page-ids-in-lanes.patch &&
#   cp docs/bench-data/s19/next-seesaw-page-ids-in-lanes.patch .carry/ && OUT=$OUT bash docs/bench-data/s19/next-call.sh
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/next-seesaw-page-ids-in-lanes.patch TESTS="test_kernels_decode_gpu" SUITES=dc512
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-230
rm -f "$OUT"/cfg*.log "$OUT"/build*.log  # keep $OUT's file count low (the device tool returns a limited number)
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfgtl.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/buildtl.log 2>&1 || { echo "timeline build failed"; exit 1; }
PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1 timeout 60 python3 tools/mla-bench/timeline.py --kernel seesaw \
  --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so --heads 128 --s-q 1 --seqlen 32768 --json "$OUT/tl_seesaw.json" 2>&1 | tail -30
# Energy per call at the 700 W cap (session 19, call 4: the first probe spent 9% more than v6): v6 (the
# base build) and the probe, each beside FlashMLA, 2 s back to back at 128 rows 32K.
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests
for l in bb b; do
  echo "=== power: $([ $l = bb ] && echo 'v6 (base)' || echo 'seesaw probe')"
  timeout 60 python3 tools/mla-bench/power_draw.py --lib /tmp/$l/tools/mla-bench/libmla_decode_capi.so \
    --shape 128:1:32768 --seconds 2 --rounds 1 2>&1 | tail -4
done
echo "call total $(( $(date +%s) - T0 )) s"
