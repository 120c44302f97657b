#!/usr/bin/env bash
# session 9 call 6 (call 5 hung: setmaxnreg 240 + 32 over the pool): the two-chain FP8 kernel (kernels/fp8_decode_duo.cu, built with -DMLA_DUO for
# <= 16 rows) against the narrow kernel (same tree without the flag): GPU tests of the duo build,
# then H = 16 s_q = 1 at 8K / 32K from HBM and L2-resident, alternated processes.
set -uo pipefail
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d .peer/flashmla/build ] || (bash tools/mla-bench/peer_unpack.sh > $OUT/peer.log 2>&1) &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfg.log 2>&1 || exit 1
cmake -S . -B /tmp/bd -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DCMAKE_CUDA_FLAGS=-DMLA_DUO=1 > $OUT/cfgd.log 2>&1 || exit 1
(cmake --build /tmp/b -j6 --target mla_fp8_capi > $OUT/build.log 2>&1 || echo "build base failed") &
(cmake --build /tmp/bd -j10 --target mla_fp8_capi test_kernels_fp8_gpu > $OUT/buildd.log 2>&1 || { echo "build duo failed"; grep -E "error" $OUT/buildd.log | head; }) &
wait
echo "builds $(( $(date +%s) - T0 )) s"
timeout 100 /tmp/bd/tests/kernels/test_kernels_fp8_gpu > $OUT/test_fp8_duo.log 2>&1; rc=$?; echo "duo fp8 gpu tests rc=$rc"
[ $rc = 124 ] && { tail -5 $OUT/test_fp8_duo.log; exit 1; }
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|rel|Failure" $OUT/test_fp8_duo.log | head -20
echo "tests $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
S=B128_H16_sq1_L8k_dc512,B128_H16_sq1_L32k_dc512
for mode in "" "--l2-resident"; do
  for rep in 1; do
    [ $(( $(date +%s) - T0 )) -gt 420 ] && { echo "out of time"; break 2; }
    echo "=== narrow ${mode:-hbm} rep $rep"
    timeout 45 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b/tools/mla-bench/libmla_fp8_capi.so --only $S --runs 10 $mode 2>&1 | grep "^B128" | cut -c1-140
    for np in 256; do
      echo "=== duo parts $np ${mode:-hbm} rep $rep"
      timeout 45 python3 tools/mla-bench/peer_fp8.py --lib /tmp/bd/tools/mla-bench/libmla_fp8_capi.so --only $S --runs 10 --parts $np $mode 2>&1 | grep "^B128" | cut -c1-140
    done
  done
done 2>&1 | tee $OUT/ab.txt
echo "total $(( $(date +%s) - T0 )) s"
