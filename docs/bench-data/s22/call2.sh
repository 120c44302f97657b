#!/usr/bin/env bash
# Session 22, call 2: three builds of the FP8 narrow kernel, timed alternately in separate
# peer_fp8.py processes: base (81d89ea: one tile a pass, S ahead), pair (54e6279: two tiles a pass,
# call 1) and this tree (pair + the softmax without a branch a token, ex2.approx.ftz, explicit
# roundings). Patches (carry .carry): s22-all.patch = git diff 81d89ea -- kernels lib (this
# tree), s22-pair.patch = git diff 81d89ea 54e6279 -- kernels lib. Then the GPU tests of this
# tree, the FP4 narrow route (new vs base) and this tree's narrow timeline at 32 and 16 rows.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
rm -rf /tmp/src-base /tmp/src-pair && mkdir -p /tmp/src-base
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/src-base -xf -
(cd /tmp/src-base && patch -s -R -p1 < "$OLDPWD/.carry/s22-all.patch") || { echo "patch -R failed"; exit 1; }
cp -r /tmp/src-base /tmp/src-pair
(cd /tmp/src-pair && patch -s -p1 < "$OLDPWD/.carry/s22-pair.patch") || { echo "pair patch failed"; exit 1; }
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON $3 > "$OUT/cfg-$(basename $2).log" 2>&1; }
cfg . /tmp/b-new "" && cfg /tmp/src-pair /tmp/b-pair "" && cfg /tmp/src-base /tmp/b-base "" && cfg . /tmp/b-tl -DMLA_TIMELINE=ON ||
  { tail "$OUT"/cfg-*.log; exit 1; }
cmake --build /tmp/b-pair -j4 --target mla_fp8_capi > "$OUT/build-pair.log" 2>&1 &
p1=$!
cmake --build /tmp/b-base -j4 --target mla_fp8_capi mla_kv4_capi > "$OUT/build-base.log" 2>&1 &
p2=$!
cmake --build /tmp/b-tl -j3 --target mla_fp8_capi > "$OUT/build-tl.log" 2>&1 &
p3=$!
cmake --build /tmp/b-new -j8 --target mla_fp8_capi mla_kv4_capi test_kernels_fp8_gpu test_kernels_kv4_gpu > "$OUT/build-new.log" 2>&1 ||
  { grep -E "error" "$OUT/build-new.log" | head; tail -20 "$OUT/build-new.log"; exit 1; }
wait $p1 && wait $p2 || { tail -20 "$OUT"/build-pair.log "$OUT"/build-base.log; exit 1; }
echo "builds done $(( $(date +%s) - T0 )) s"
for t in test_kernels_fp8_gpu test_kernels_kv4_gpu; do
  timeout 200 /tmp/b-new/tests/kernels/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$t.log" | head -8
done
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
ONLY=B128_H16_sq1_L8k_dc512,B128_H16_sq2_L8k_dc512,B128_H16_sq1_L32k_dc512,B128_H16_sq2_L32k_dc512
for r in 1 2; do
  for v in new pair base; do
    echo "=== FP8 round $r: $v"
    timeout 150 python3 tools/mla-bench/peer_fp8.py --lib /tmp/b-$v/tools/mla-bench/libmla_fp8_capi.so --only "$ONLY" 2>&1 |
      grep -E "^device|^B128"
  done
done
for v in new base; do
  echo "=== 4-bit fp4 suite: $v"
  timeout 200 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b-$v/tools/mla-bench/libmla_kv4_capi.so --suite fp4 --runs 9 2>&1 |
    grep -E "^device|^fp4"
done
wait $p3 || { tail -20 "$OUT/build-tl.log"; exit 1; }
for sq in 2 1; do
  echo "=== timeline fp8-narrow, this tree, H 16 s_q $sq"
  python3 tools/mla-bench/timeline.py --kernel fp8-narrow --lib /tmp/b-tl/tools/mla-bench/libmla_fp8_capi.so --heads 16 --s-q $sq \
    2>&1 | tail -22
done
echo "total $(( $(date +%s) - T0 )) s"
