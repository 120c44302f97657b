#!/usr/bin/env bash
# One device call for an A/B of decode kernel variants beside FlashMLA: build, the GPU tests of
# variant $V first under a short timeout (a hang costs 90 s, not the call), then the peer suite
# for each run in $RUNS ("variant" or "variant:knob", the knob exported as MLA_DECODE_EXP for
# launchers that read one during an experiment), Nsight Compute profiles (ncu_decode.sh) and the
# SASS of the split kernels matching $KERNEL; every output packed in $OUT/all.tar.xz (with the
# FlashMLA build when it was built from source in this call).
# Usage (GPU machine, repo root, .peer carried): OUT=dir [V=0] [SUITE=manyhead] [RUNS="0 8:1"]
#   [FULL=1: all decode GPU tests too] [PEER=0] [NCU_VARIANTS="0 8"] [NCU_WHO="flashmla ours"] [SASS=1]
#   [KERNEL=decode_split_v6] (V=0 runs only the bad-page tests first: no test is named for variant 0)
#   bash tools/mla-bench/run_ab_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
V=${V:-0}
W=/tmp/ab-out
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
# FlashMLA built from source here: its build comes back for .peer/flashmla-built.tar.xz, which
# peer_unpack.sh then uses instead of building again (~2 min of every later call)
if [ ! -f .peer/flashmla-built.tar.xz ] && [ -d .peer/flashmla/flash_mla ]; then
  tar -C .peer -cJf "$W/flashmla-built.tar.xz" --exclude=flashmla/build --exclude=flashmla/csrc --exclude=flashmla/.git flashmla
fi
export PYTHONPATH=$PWD/.peer/flashmla${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# runs: "variant" or "variant:knob" (MLA_DECODE_EXP, read by a launcher during an experiment)
n=0
for run in $([ "${PEER:-1}" = 1 ] && echo ${RUNS:-0 $V}); do
  v=${run%%:*}; e=${run#*:}; [ "$e" = "$run" ] && e=0; n=$((n + 1))
  f="$W/peer_${n}_v${v}_e$e"
  MLA_DECODE_EXP=$e timeout 200 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
    --suite "${SUITE:-manyhead}" --variant $v --json "$f.json" > "$f.log" 2>&1
  echo "=== run $n: variant $v exp $e (rc=$?)"; grep -vE "^shape|^device" "$f.log" | cut -c1-92
done
for v in ${NCU_VARIANTS:-$V}; do
  OUT=$W SHAPES="${NCU_SHAPES:-h128_sq1_l8k}" VARIANT=$v WHO="${NCU_WHO:-ours}" bash tools/mla-bench/ncu_decode.sh 2>&1 |
    grep -E "^ncu|stall|Duration|Throughput|Hit Rate|Issue|Registers" | head -40
done
# the SASS of the split kernels named by $KERNEL (spills, barrier and wgmma placement)
K=${KERNEL:-decode_split_v6}
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
"$CUOBJ" -sass /tmp/b/tools/mla-bench/libmla_decode_capi.so 2>/dev/null |
  awk -v k="$K" '/Function : /{on = index($0, k) > 0} on' > "$W/kernel.sass"
echo "$K SASS: $(wc -l < "$W/kernel.sass") lines, $(grep -c 'LDL\|STL' "$W/kernel.sass") local loads/stores"
pack; ls -la "$OUT/all.tar.xz"
