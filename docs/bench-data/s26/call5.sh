#!/usr/bin/env bash
# (The .carry patches are archived here: s26A = v6-p-in-stage.patch, s26C / s26C2 / s26T (= C2) / s26D =
# v6-p-before-rs-{C,C2,C2,D}.patch; each applies on 4b8c76c. To rerun: cp the archived patch to .carry/.)
# Session 26, call 5 (nvidia-h200, carry .peer .carry): D = P stored and handed over (mbarrier, no fence)
# before warpgroup 0's register-A P.V, warpgroup 1 fencing after its acquire (.carry/s26D.patch = this
# tree's kernels against 4b8c76c): decode GPU tests, the dc512 A/B beside the base and FlashMLA, then
# D's timeline at 128 rows 8K (the base's: calls 2 and 4).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
( cmake -S . -B /tmp/tl_d -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /dev/null 2>&1 &&
  cmake --build /tmp/tl_d -j3 --target mla_decode_capi > "$OUT/build_tl.log" 2>&1; echo "timeline build rc=$?" > /tmp/tl_rc ) &
OUT=$OUT PATCH=.carry/s26D.patch SUITES=dc512 TESTS=test_kernels_decode_gpu TEST_TIMEOUT=200 STOP_ON_FAIL=1 \
  bash tools/mla-bench/run_ab_patch_device.sh || exit 1
wait; cat /tmp/tl_rc
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/tl_d/tools/mla-bench/libmla_decode_capi.so \
  --heads 128 --s-q 1 --seqlen 8192 --json "$OUT/tl_d_h128_sq1_l8192.json" 2>&1 | tail -20
echo "call total $(( $(date +%s) - T0 )) s"
