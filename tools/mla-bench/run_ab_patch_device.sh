#!/usr/bin/env bash
# One device call for an A/B of a kernel change against the tree before it, in the same call:
# the base is this tree with $PATCH reversed (make it here with `git diff BASE -- kernels lib
# > .carry/x.patch` and carry .carry; untracked new files need `git add -N` first). Builds both
# (capi libraries; the GPU tests of this tree), runs the tests, then
#  - peer_flashmla.py --base-lib for each BF16 suite in $SUITES: ours, the base and FlashMLA
#    interleaved in one process (the base's outputs checked bit-identical or not);
#  - with FP8_ONLY (comma-separated peer_fp8.py shape names): new and base FP8 builds alternated
#    in separate processes, twice each;
#  - with KV4_SUITES (peer_kv4.py suites, e.g. "fp4 fp4rows"): the same for the 4-bit caches
#    (KV4_ARGS adds peer_kv4.py arguments, e.g. "--routes fp8" to time the FP8 route alone).
# Usage (GPU machine, repo root, .peer and .carry carried):
#   OUT=dir PATCH=.carry/x.patch [SUITES=manyhead] [FP8_ONLY=B128_H128_sq1_L8k_dc256,...]
#   [KV4_SUITES=fp4] [TESTS="test_kernels_decode_gpu test_kernels_fp8_gpu"] [TEST_TIMEOUT=s] [STOP_ON_FAIL=1]
#   bash tools/mla-bench/run_ab_patch_device.sh
# (SUITES=none: no peer timing, e.g. to build here and run one's own checks after.)
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
: "${PATCH:?PATCH=file (the change to reverse for the base)}"
TESTS=${TESTS-test_kernels_decode_gpu}  # TESTS="" runs none
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/base-src -xf -
(cd /tmp/base-src && patch -s -R -p1 < "$OLDPWD/$PATCH") || { echo "patch -R $PATCH failed"; exit 1; }
LIBS="mla_decode_capi"; [ -n "${FP8_ONLY:-}" ] && LIBS="$LIBS mla_fp8_capi"; [ -n "${KV4_SUITES:-}" ] && LIBS="$LIBS mla_kv4_capi"
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 || { tail "$OUT/cfg.log"; exit 1; }
cmake -S /tmp/base-src -B /tmp/bb -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfgb.log" 2>&1 ||
  { tail "$OUT/cfgb.log"; exit 1; }
cmake --build /tmp/bb -j6 --target $LIBS > "$OUT/buildb.log" 2>&1 &
bpid=$!
cmake --build /tmp/b -j12 --target $LIBS $TESTS > "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
wait $bpid || { tail -30 "$OUT/buildb.log"; exit 1; }
echo "builds done $(( $(date +%s) - T0 )) s"
for t in $TESTS; do
  timeout "${TEST_TIMEOUT:-200}" /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1; rc=$?; echo "$t rc=$rc"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$t.log" | head -8
  # STOP_ON_FAIL=1: a failed or hung test ends the call before any timing (a hung kernel would
  # hang every timing process after it too)
  [ -n "${STOP_ON_FAIL:-}" ] && [ $rc -ne 0 ] && { echo "stopping: $t failed"; exit 1; }
done
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for s in ${SUITES:-manyhead}; do
  [ "$s" = none ] && continue  # SUITES=none: builds (and tests) only
  timeout 300 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
    --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so --suite "$s" --json "$OUT/ab_$s.json" 2>&1 | tee "$OUT/ab_$s.log"
done
if [ -n "${FP8_ONLY:-}" ]; then
  for lib in /tmp/b /tmp/bb /tmp/b /tmp/bb; do
    echo "=== FP8: $([ $lib = /tmp/b ] && echo this tree || echo base)"
    timeout 150 python3 tools/mla-bench/peer_fp8.py --lib $lib/tools/mla-bench/libmla_fp8_capi.so --only "$FP8_ONLY" 2>&1
    # (its device line carries the copy / GEMM ceilings measured in that process)
  done
fi
for s in ${KV4_SUITES:-}; do
  for lib in /tmp/b /tmp/bb /tmp/b /tmp/bb; do
    echo "=== 4-bit, suite $s: $([ $lib = /tmp/b ] && echo this tree || echo base)"
    timeout 200 python3 tools/mla-bench/peer_kv4.py --lib $lib/tools/mla-bench/libmla_kv4_capi.so --suite "$s" --runs 9 ${KV4_ARGS:-} 2>&1 |
      grep -E "^device|^fp4|^codebook"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
