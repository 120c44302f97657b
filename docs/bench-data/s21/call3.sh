#!/usr/bin/env bash
# Session 21, call 3: two FP4-route changes, stacked, each against the tree before it, in one call.
# B (.carry/s21B.patch): e2m1x8_to_e4m3 in nine instructions (sign-replicating prmt), bit-identical.
# A (.carry/s21A.patch, on top of B): the narrow kernel's P.V warps convert tile it + 2 under their
# P.V wgmmas of tile it instead of before waiting for the stage of tile it.
# Builds: /tmp/b (A+B, the tree), /tmp/bB (B), /tmp/b0 (neither) and a timeline build of A+B;
# GPU tests (kv4, fp8) of the tree; peer_kv4.py suites fp4 (narrow) and fp4rows (64-row) rotating.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
mk() {  # dir, patches to reverse
  local d=$1; shift
  rm -rf $d-src && mkdir -p $d-src
  tar --exclude=./.peer --exclude=./.git -cf - . | tar -C $d-src -xf -
  for p in "$@"; do (cd $d-src && patch -s -R -p1 < "$OLDPWD/$p") || { echo "patch -R $p failed"; exit 1; }; done
}
mk /tmp/bB .carry/s21A.patch
mk /tmp/b0 .carry/s21A.patch .carry/s21B.patch
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1
cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON >> "$OUT/cfg.log" 2>&1
cmake -S /tmp/bB-src -B /tmp/bB -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON >> "$OUT/cfg.log" 2>&1
cmake -S /tmp/b0-src -B /tmp/b0 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON >> "$OUT/cfg.log" 2>&1
cmake --build /tmp/bB -j4 --target mla_kv4_capi > "$OUT/buildB.log" 2>&1 & p1=$!
cmake --build /tmp/b0 -j4 --target mla_kv4_capi > "$OUT/build0.log" 2>&1 & p2=$!
cmake --build /tmp/bt -j3 --target mla_kv4_capi > "$OUT/buildt.log" 2>&1 & p3=$!
cmake --build /tmp/b -j8 --target mla_kv4_capi test_kernels_kv4_gpu test_kernels_fp8_gpu > "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
wait $p1 $p2 || { tail -5 "$OUT/buildB.log" "$OUT/build0.log"; exit 1; }
echo "builds $(( $(date +%s) - T0 )) s"
for t in test_kernels_kv4_gpu test_kernels_fp8_gpu; do
  timeout 200 /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$t.log" | head -8
done
wait; tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for s in fp4 fp4rows; do
  for lib in /tmp/b /tmp/bB /tmp/b0 /tmp/b /tmp/bB /tmp/b0; do
    [ $s = fp4rows ] && [ $lib = /tmp/b ] && continue  # A changes the narrow kernel only
    echo "=== suite $s: $lib"
    timeout 200 python3 tools/mla-bench/peer_kv4.py --lib $lib/tools/mla-bench/libmla_kv4_capi.so --suite $s --runs 9 2>&1 |
      grep -E "^device|fp8 route"
  done
done
wait $p3 && python3 tools/mla-bench/timeline.py --kernel fp4-narrow --lib /tmp/bt/tools/mla-bench/libmla_kv4_capi.so \
  --heads 16 --json "$OUT/tl_fp4.json" 2>&1 | tail -30
echo "total $(( $(date +%s) - T0 )) s"
