#!/usr/bin/env bash
# One device call for a new many-head kernel variant: build, its GPU tests first under a short
# timeout (a hang costs 90 s, not the call), then the peer suite beside FlashMLA for variant 0
# and the new one, and an Nsight Compute profile of the new one; outputs packed in one archive.
# Usage (GPU machine, repo root, .peer carried): OUT=dir V=8 [SUITE=manyhead] [FULL=1] [PEER=0]
#   [NCU_VARIANTS="0 8"] [NCU_WHO="flashmla ours"] [SASS=1]
#   bash tools/mla-bench/run_seesaw_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
V=${V:-8}
W=/tmp/seesaw-out
rm -rf "$W" && mkdir -p "$W"
(bash tools/mla-bench/peer_unpack.sh > "$W/peer_build.log" 2>&1; echo "peer rc=$?" >> "$W/peer_build.log") &
peer=$!
pack() { tar -C "$W" -cJf "$OUT/all.tar.xz" --exclude='*.ncu-rep' . ; }
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$W/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi test_kernels_decode_gpu >> "$W/build.log" 2>&1 ||
  { tail -30 "$W/build.log"; pack; exit 1; }
echo "build done $(date +%T)"
timeout 90 /tmp/b/tests/kernels/test_kernels_decode_gpu --gtest_filter="*Variant$V*:*BadPage*" > "$W/test_v$V.log" 2>&1
rc=$?
echo "variant $V tests rc=$rc"
grep -E "^\[  (     OK|FAILED) |Failure|vs twin|wrong|Expected|Which is|actual" "$W/test_v$V.log" | cut -c1-220 | head -50
if [ $rc -ne 0 ]; then pack; exit 1; fi
if [ "${FULL:-0}" = 1 ]; then
  timeout 200 /tmp/b/tests/kernels/test_kernels_decode_gpu > "$W/test_all.log" 2>&1
  echo "all decode GPU tests rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$W/test_all.log"
fi
wait $peer; tail -1 "$W/peer_build.log"
export PYTHONPATH=$PWD/.peer/flashmla${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# runs: "variant" or "variant:MLA_SEESAW_EXP" (an experiment knob of the seesaw launcher)
n=0
for run in $([ "${PEER:-1}" = 1 ] && echo ${RUNS:-0 $V}); do
  v=${run%%:*}; e=${run#*:}; [ "$e" = "$run" ] && e=0; n=$((n + 1))
  f="$W/peer_${n}_v${v}_e$e"
  MLA_SEESAW_EXP=$e timeout 200 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
    --suite "${SUITE:-manyhead}" --variant $v --json "$f.json" > "$f.log" 2>&1
  echo "=== run $n: variant $v exp $e (rc=$?)"; grep -vE "^shape|^device" "$f.log" | cut -c1-92
done
for v in ${NCU_VARIANTS:-$V}; do
  OUT=$W SHAPES="${NCU_SHAPES:-h128_sq1_l8k}" VARIANT=$v WHO="${NCU_WHO:-ours}" bash tools/mla-bench/ncu_decode.sh 2>&1 |
    grep -E "^ncu|stall|Duration|Throughput|Hit Rate|Issue|Registers" | head -40
done
# the new kernel's SASS (spills, barrier and wgmma placement)
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
"$CUOBJ" -sass /tmp/b/tools/mla-bench/libmla_decode_capi.so 2>/dev/null |
  awk '/Function : .*seesaw/{on=1} /Function : /{if ($0 !~ /seesaw/) on=0} on' > "$W/seesaw.sass"
echo "seesaw SASS: $(wc -l < "$W/seesaw.sass") lines, $(grep -c 'LDL\|STL' "$W/seesaw.sass") local loads/stores"
pack; ls -la "$OUT/all.tar.xz"
