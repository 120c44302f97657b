#!/usr/bin/env bash
# Session 19, call 7 (nvidia-h200, no carry): session 18's prepared FP8 change, timeline only (no
# device time left for the peer A/B): the 64-row FP8 kernel with S of tile i + 1 issued before tile
# i's softmax (docs/bench-data/s18/next-fp8-rows64-s-overlap-timeline.patch) against this tree's
# kernel, both with the clock events, same call; the FP8 GPU tests on the patched build.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
rm -rf /tmp/ov && mkdir -p /tmp/ov && tar --exclude=./.git --exclude=./.peer -cf - . | tar -C /tmp/ov -xf - &&
  (cd /tmp/ov && git apply docs/bench-data/s18/next-fp8-rows64-s-overlap-timeline.patch 2>/dev/null || patch -s -p1 < docs/bench-data/s18/next-fp8-rows64-s-overlap-timeline.patch) || { echo "patch failed"; exit 1; }
cmake -S . -B /tmp/tb -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg0.log 2>&1 || exit 1
cmake -S /tmp/ov -B /tmp/to -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg1.log 2>&1 || exit 1
cmake --build /tmp/tb -j7 --target mla_fp8_capi > /tmp/b0.log 2>&1 &
cmake --build /tmp/to -j9 --target mla_fp8_capi test_kernels_fp8_gpu > /tmp/b1.log 2>&1 || { grep -E "error|serializ" /tmp/b1.log | head; exit 1; }
wait || exit 1
echo "built $(( $(date +%s) - T0 )) s"
timeout 120 /tmp/to/tests/kernels/test_kernels_fp8_gpu 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | head -6
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for t in tb to; do
  echo "=== $([ $t = tb ] && echo 'this tree' || echo 'S under the softmax')"
  timeout 60 python3 tools/mla-bench/timeline.py --kernel fp8-rows64 --lib /tmp/$t/tools/mla-bench/libmla_fp8_capi.so \
    --heads 128 --s-q 1 --seqlen 8192 --json "$OUT/tl_fp8_$t.json" 2>&1 | tail -17
done
echo "call total $(( $(date +%s) - T0 )) s"
