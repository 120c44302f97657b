#!/usr/bin/env bash
# (The .carry patches are archived here: s26A = v6-p-in-stage.patch, s26C / s26C2 / s26T (= C2) / s26D =
# v6-p-before-rs-{C,C2,C2,D}.patch; each applies on 4b8c76c. To rerun: cp the archived patch to .carry/.)
# Session 26, call 3 (nvidia-h200, carry .peer .carry): two orders of v6's P hand-over (P in the stage's
# RoPE block, mbarrier), both storing P *before* warpgroup 0's register-A P.V (call 2's timeline: stores
# after it waited ~360 cycles), against the base (4b8c76c's v6):
#   C  = .carry/s26C.patch  (stores, proxy fence, mbarrier arrive, then P.V issue) = this tree's kernels
#   C2 = .carry/s26C2.patch (stores, P.V issue, then proxy fence and arrive)
# Decode GPU tests of both, then peer_flashmla.py --suite dc512 for each beside the base and FlashMLA.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
for t in base c2; do
  rm -rf /tmp/src_$t && mkdir -p /tmp/src_$t
  tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/src_$t -xf -
  (cd /tmp/src_$t && patch -s -R -p1 < "$OLDPWD/.carry/s26C.patch") || { echo "patch -R failed"; exit 1; }
done
(cd /tmp/src_c2 && patch -s -p1 < "$OLDPWD/.carry/s26C2.patch") || { echo "patch C2 failed"; exit 1; }
cmake -S /tmp/src_base -B /tmp/b_base -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /dev/null 2>&1 &&
  cmake --build /tmp/b_base -j4 --target mla_decode_capi > "$OUT/build_base.log" 2>&1 &
for t in c c2; do
  src=.; [ $t = c2 ] && src=/tmp/src_c2
  ( cmake -S $src -B /tmp/b_$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /dev/null 2>&1 &&
    cmake --build /tmp/b_$t -j6 --target mla_decode_capi test_kernels_decode_gpu > "$OUT/build_$t.log" 2>&1; echo "$t build rc=$?" ) &
done
wait; echo "built $(( $(date +%s) - T0 )) s"; tail -1 "$OUT/peer.log"
for t in c c2; do
  timeout 200 /tmp/b_$t/tests/kernels/test_kernels_decode_gpu > "$OUT/test_$t.log" 2>&1; echo "$t tests rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/test_$t.log" | head -5
done
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
for t in c c2; do
  echo "=== $t"
  timeout 200 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b_$t/tools/mla-bench/libmla_decode_capi.so \
    --base-lib /tmp/b_base/tools/mla-bench/libmla_decode_capi.so --suite dc512 --json "$OUT/ab_$t.json" 2>&1 | tee "$OUT/ab_$t.log"
done
echo "call total $(( $(date +%s) - T0 )) s"
