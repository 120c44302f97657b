#!/usr/bin/env bash
# Session 19, call 6 (nvidia-h200, carry .peer .carry): the seesaw probe with the page ids read (their use, the check and the row, a pair later)
# a pair ahead (seesaw-pages-ahead.patch, this tree) against v6 (the tree before it) and FlashMLA in
# one process (dc512 suite), the decode GPU tests on the probe, then the probe's timeline.
set -uo pipefail
export OUT=${OUT:-/tmp/mla-out} PATCH=.carry/seesaw-pages-ahead.patch TESTS="test_kernels_decode_gpu" SUITES=dc512
T0=$(date +%s)
bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | cut -c1-230
cmake -S . -B /tmp/btl -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfgtl.log 2>&1 &&
  cmake --build /tmp/btl -j16 --target mla_decode_capi > /tmp/buildtl.log 2>&1 || { echo "timeline build failed"; exit 1; }
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for shape in "128 1 8192" "128 1 32768"; do
  set -- $shape
  timeout 60 python3 tools/mla-bench/timeline.py --kernel seesaw --lib /tmp/btl/tools/mla-bench/libmla_decode_capi.so \
    --heads "$1" --s-q "$2" --seqlen "$3" --json "$OUT/tl_seesaw_h$1_sq$2_l$3.json" 2>&1 | tail -30
done
echo "call total $(( $(date +%s) - T0 )) s"
