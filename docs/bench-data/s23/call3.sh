#!/usr/bin/env bash
# Session 23, call 3: three builds of the FP4 cache's FP8 route, timed alternately in separate
# peer_kv4.py processes (--routes fp8): base (04016e6), pf512 (this tree with the 512-thread narrow
# kernel: kOwnConv false; the raw copier's page id loaded a tile ahead) and this tree (own
# converters at 16 rows, 640 threads, + the page id ahead). .carry/s23-all.patch = git diff 04016e6
# -- kernels lib. GPU tests of this tree and of pf512's 4-bit route, then this tree's fp4-narrow
# timeline at H = 16 8K.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
rm -rf /tmp/src-base /tmp/src-pf512 && mkdir -p /tmp/src-base /tmp/src-pf512
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/src-base -xf -
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/src-pf512 -xf -
(cd /tmp/src-base && patch -s -R -p1 < "$OLDPWD/.carry/s23-all.patch") || { echo "patch -R failed"; exit 1; }
sed -i 's/static constexpr bool kOwnConv = FP4 \&\& N == 16;/static constexpr bool kOwnConv = false;/' /tmp/src-pf512/kernels/fp8_decode_narrow.cu
grep -q "kOwnConv = false;" /tmp/src-pf512/kernels/fp8_decode_narrow.cu || { echo "pf512 sed failed"; exit 1; }
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON $3 > "$OUT/cfg-$(basename $2).log" 2>&1; }
cfg . /tmp/b-new "" && cfg /tmp/src-pf512 /tmp/b-pf512 "" && cfg /tmp/src-base /tmp/b-base "" && cfg . /tmp/b-tl -DMLA_TIMELINE=ON ||
  { tail "$OUT"/cfg-*.log; exit 1; }
cmake --build /tmp/b-pf512 -j4 --target mla_kv4_capi test_kernels_kv4_gpu > "$OUT/build-pf512.log" 2>&1 &
p1=$!
cmake --build /tmp/b-base -j3 --target mla_kv4_capi > "$OUT/build-base.log" 2>&1 &
p2=$!
cmake --build /tmp/b-tl -j2 --target mla_kv4_capi > "$OUT/build-tl.log" 2>&1 &
p3=$!
cmake --build /tmp/b-new -j7 --target mla_kv4_capi test_kernels_fp8_gpu test_kernels_kv4_gpu > "$OUT/build-new.log" 2>&1 ||
  { grep -E "error" "$OUT/build-new.log" | head; tail -20 "$OUT/build-new.log"; exit 1; }
wait $p1 && wait $p2 || { tail -20 "$OUT"/build-pf512.log "$OUT"/build-base.log; exit 1; }
echo "builds done $(( $(date +%s) - T0 )) s"
for t in b-new/tests/kernels/test_kernels_kv4_gpu b-pf512/tests/kernels/test_kernels_kv4_gpu b-new/tests/kernels/test_kernels_fp8_gpu; do
  log="$OUT/$(echo $t | cut -d/ -f1)-$(basename $t).log"
  timeout 90 /tmp/$t > "$log" 2>&1; rc=$?; echo "$t rc=$rc"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$log" | head -8
  [ $rc -ne 0 ] && { echo "stopping: $t failed"; exit 1; }
done
wait $p3
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for r in 1 2; do
  for v in new pf512 base; do
    suites="fp4"; [ $r = 1 ] && suites="fp4 fp4rows"
    for s in $suites; do
      echo "=== round $r, suite $s: $v"
      timeout 150 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b-$v/tools/mla-bench/libmla_kv4_capi.so --suite $s --runs 7 \
        --routes fp8 2>&1 | grep -E "^device|^fp4"
    done
  done
done
echo "=== timeline fp4-narrow, this tree, H 16 s_q 1"
timeout 60 python3 tools/mla-bench/timeline.py --kernel fp4-narrow --lib /tmp/b-tl/tools/mla-bench/libmla_kv4_capi.so --heads 16 2>&1 | tail -22
echo "total $(( $(date +%s) - T0 )) s"
