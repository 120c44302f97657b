#!/usr/bin/env bash
# For the next session (branch wip/vt-ldmatrix, not yet run on a GPU): the FP8 / 4-bit GPU tests of
# the branch, then A/B against main (git archive) on the narrow, 64-row and pair kernels' shapes.
set -uo pipefail
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d .peer/flashmla/build ] || (bash tools/mla-bench/peer_unpack.sh > $OUT/peer.log 2>&1) &
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
git archive main | tar -C /tmp/base-src -xf -
cmake -S /tmp/base-src -B /tmp/bb -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfgb.log 2>&1 || exit 1
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfg.log 2>&1 || exit 1
(cmake --build /tmp/bb -j4 --target mla_fp8_capi mla_kv4_capi > $OUT/buildb.log 2>&1 || echo "build base failed") &
(cmake --build /tmp/b -j12 --target mla_fp8_capi mla_kv4_capi test_kernels_fp8_gpu test_kernels_kv4_gpu > $OUT/build.log 2>&1 || echo "build failed") &
wait
for t in test_kernels_fp8_gpu test_kernels_kv4_gpu; do
  timeout 150 /tmp/b/tests/kernels/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/$t.log | head -6
done
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
S=B128_H16_sq1_L8k_dc512,B128_H16_sq2_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512,B128_H128_sq1_L8k_dc256,B128_H128_sq1_L32k_dc256
for rep in 1 2; do for v in b ""; do
  src=$PWD; [ "$v" = b ] && src=/tmp/base-src
  echo "=== ${v:-branch} rep $rep"
  (cd $src && timeout 90 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b$v/tools/mla-bench/libmla_fp8_capi.so --only $S --runs 10 2>&1 | grep -E "^B128|^device" | cut -c1-160)
  (cd $src && timeout 90 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b$v/tools/mla-bench/libmla_kv4_capi.so --suite fp4 --runs 10 2>&1 | grep -E "fp8 route|^device" | cut -c1-140)
  (cd $src && timeout 90 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b$v/tools/mla-bench/libmla_kv4_capi.so --suite fp4rows --runs 10 2>&1 | grep -E "fp8 route|^device" | cut -c1-140)
done; done 2>&1 | tee $OUT/ab.txt
echo "total $(( $(date +%s) - T0 )) s"
