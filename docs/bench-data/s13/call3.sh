#!/usr/bin/env bash
# Session 13, call 3 (nvidia-h200, carry .carry .peer): the BF16 wgmma softmax with ex2.approx.ftz
# (.carry/ex2.patch, the tree's uncommitted change) against the tree before it, in one process beside
# FlashMLA (manyhead suite: v6 and v7; then dc512 again), and two timing-only variants on top of it
# (outputs wrong by design) to size what is left in warpgroup 0's chain: no O rescale
# (.carry/ex2_norescale.patch) and no exponentials in the softmax (.carry/ex2_noexp.patch).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
mk() {  # mk dir patch-to-reverse [patch-to-apply]
  rm -rf $1 && mkdir -p $1 && tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C $1 -xf -
  (cd $1 && patch -s -R -p1 < "$OLDPWD/$2" && { [ -z "${3:-}" ] || patch -s -p1 < "$OLDPWD/$3"; }) || { echo "patch failed for $1"; exit 1; }
}
mk /tmp/src-base .carry/ex2.patch
mk /tmp/src-norescale .carry/ex2.patch .carry/ex2_norescale.patch
mk /tmp/src-noexp .carry/ex2.patch .carry/ex2_noexp.patch
bld() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfg_$(basename $2).log 2>&1 &&
        cmake --build $2 -j$3 --target mla_decode_capi $4 > $OUT/build_$(basename $2).log 2>&1 || { echo "build $2 failed"; tail -20 $OUT/build_$(basename $2).log; }; }
bld . /tmp/b 8 test_kernels_decode_gpu &
bld /tmp/src-base /tmp/bb 4 "" &
bld /tmp/src-norescale /tmp/b1 2 "" &
bld /tmp/src-noexp /tmp/b2 2 "" &
wait
echo "builds done $(( $(date +%s) - T0 )) s; $(tail -1 $OUT/peer.log)"
timeout 200 /tmp/b/tests/kernels/test_kernels_decode_gpu > "$OUT/test_decode_gpu.log" 2>&1; echo "decode GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/test_decode_gpu.log" | head -8
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
P="python3 tools/mla-bench/peer_flashmla.py"
L=tools/mla-bench/libmla_decode_capi.so
echo "=== ex2 vs base, manyhead";  timeout 300 $P --lib /tmp/b/$L --base-lib /tmp/bb/$L --suite manyhead --json $OUT/ex2_manyhead.json | grep -v "^device"
echo "=== ex2 vs base, dc512";     timeout 300 $P --lib /tmp/b/$L --base-lib /tmp/bb/$L --suite dc512 --json $OUT/ex2_dc512.json | grep -v "^device"
echo "=== no rescale vs ex2, dc512 (timing only)"; timeout 300 $P --lib /tmp/b1/$L --base-lib /tmp/b/$L --suite dc512 --json $OUT/norescale_dc512.json | grep -v "^device"
echo "=== no exp vs ex2, dc512 (timing only)";     timeout 300 $P --lib /tmp/b2/$L --base-lib /tmp/b/$L --suite dc512 --json $OUT/noexp_dc512.json | grep -v "^device"
echo "total $(( $(date +%s) - T0 )) s"
