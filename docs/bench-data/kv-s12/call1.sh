#!/usr/bin/env bash
# Session 12, call 1 (nvidia-h200, carry .carry .peer): the FP4 cache's conversion on the 64-row
# kernel's producer warpgroup (.carry/fp4prod.patch) on the GPU: the 4-bit, FP8 and verify
# fp8-route GPU tests, then an A/B in alternated processes (base = the tree with the patch
# reversed) with mla-bench --kv fp4, then peer_kv4.py --suite fp4rows (FlashMLA in the same
# process) for both libraries. Prediction: docs/gpu-notes.md, session 12.
# To rerun: git diff a73c8a5~1 <rev> -- kernels > .carry/fp4prod.patch, rev = 1ad526c (3 FP8 + 1 raw stage:
# call 1) or d41fa75 (2 FP8 + 3 raw: call 2), on a tree without the change (reverted in 6a89c1f).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
rm -rf /tmp/base && mkdir -p /tmp/base && tar --exclude=./.carry --exclude=./.peer -cf - . | tar -C /tmp/base -xf - &&
  (cd /tmp/base && patch -s -R -p1 < "$OLDPWD/.carry/fp4prod.patch") || { echo "base tree failed"; exit 1; }
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1; echo "peer rc=$? $(( $(date +%s) - T0 )) s") &
PEER_PID=$!
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla-bench mla_kv4_capi test_kernels_fp8_gpu test_kernels_kv4_gpu test_verify_kv4_fp8_route_gpu \
    >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "new built $(( $(date +%s) - T0 )) s"
(cmake -S /tmp/base -B /tmp/bb -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build_base.log" 2>&1 &&
  cmake --build /tmp/bb -j16 --target mla-bench mla_kv4_capi >> "$OUT/build_base.log" 2>&1) &
BASE_PID=$!
for t in kernels/test_kernels_kv4_gpu kernels/test_kernels_fp8_gpu verify/test_verify_kv4_fp8_route_gpu; do
  timeout 300 /tmp/b/tests/$t > "$OUT/$(basename $t).log" 2>&1
  echo "$t rc=$? ($(( $(date +%s) - T0 )) s)"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$(basename $t).log" | head -12
done
wait $BASE_PID || { echo "base build failed"; grep -E "error|FAILED" "$OUT/build_base.log" | head; exit 1; }
echo "base built $(( $(date +%s) - T0 )) s"
for rep in 1 2; do
  for v in base new; do
    B=/tmp/b; [ $v = base ] && B=/tmp/bb
    for args in "--heads 128 --seqlen 8192" "--heads 128 --seqlen 32768" "--heads 64 --seqlen 8192" "--heads 64 --sq 2 --seqlen 8192" "--heads 128 --dc 256 --seqlen 8192" "--heads 16 --seqlen 8192"; do
      echo "== $v rep $rep: $args"
      timeout 120 $B/tools/mla-bench/mla-bench --runs 30 --no-ceilings --kv fp4 $args 2>&1 | grep -E "^  (fp4|bf16)"
    done
  done
done
echo "A/B done $(( $(date +%s) - T0 )) s"
wait $PEER_PID
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for v in new base; do
  B=/tmp/b; [ $v = base ] && B=/tmp/bb
  L=$(find $B -name "libmla_kv4_capi.so" | head -1)
  echo "== peer_kv4 fp4rows $v ($L)"
  timeout 240 python3 tools/mla-bench/peer_kv4.py --lib "$L" --suite fp4rows --runs 20 --json "$OUT/peer_fp4rows_$v.json" 2>&1 | tail -8
done
echo "total $(( $(date +%s) - T0 )) s"
