#!/usr/bin/env bash
# session 9 call 1: every GPU test of the tree (HEAD 9cdca0d + the 64-row S overlap), then A/B of the
# 64-row FP8 kernel: S of tile it + 1 issued before the softmax of tile it (tree) vs HEAD (base).
set -uo pipefail
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
(bash tools/mla-bench/peer_unpack.sh > $OUT/peer.log 2>&1) &
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/base-src -xf -
(cd /tmp/base-src && patch -s -R -p1 < $OLDPWD/docs/bench-data/decode-ii-s9/call1-rows64-s-overlap.patch) || { echo "patch -R failed"; exit 1; }
cmake -S /tmp/base-src -B /tmp/bb -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfgb.log 2>&1 || exit 1
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfg.log 2>&1 || exit 1
(cmake --build /tmp/bb -j3 --target mla_fp8_capi > $OUT/buildb.log 2>&1 || echo "build base failed") &
(cmake --build /tmp/b -j13 > $OUT/build.log 2>&1 || { echo "build tree failed"; grep -E "error|FAILED" $OUT/build.log | head; }) &
wait
echo "builds $(( $(date +%s) - T0 )) s"
(cd /tmp/b && timeout 300 ctest -L gpu --output-on-failure -j2 > $OUT/ctest_gpu.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|tests failed|Failed|\*\*\*" $OUT/ctest_gpu.log | head -20
echo "tests done $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
S=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512,B128_H128_sq1_L32k_dc512,B128_H128_sq1_L8k_dc256
for rep in 1 2; do
  for v in b ""; do
    [ $(( $(date +%s) - T0 )) -gt 520 ] && { echo "out of time"; break 2; }
    echo "=== variant ${v:-tree} rep $rep"
    src=$PWD; [ "$v" = b ] && src=/tmp/base-src
    (cd $src && timeout 100 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b$v/tools/mla-bench/libmla_fp8_capi.so --only $S --runs 10 2>&1 | grep -E "^B128|^device" | cut -c1-140)
  done
done 2>&1 | tee $OUT/ab.txt
echo "total $(( $(date +%s) - T0 )) s"
