#!/usr/bin/env bash
# Session 11, call 9 (nvidia-h200): after the review refactors (shared FP8 width predicate, the
# capi parameter helpers in mla-bench and the C entry points, the package's shared shape check):
# the FP8, 4-bit and verify fp8-route GPU tests, both package checks, mla-bench --kv fp8 / fp4.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla-bench mla_decode_capi mla_fp8_capi mla_kv4_capi test_kernels_fp8_gpu \
    test_kernels_kv4_gpu test_verify_kv4_fp8_route_gpu >> "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
for t in kernels/test_kernels_fp8_gpu kernels/test_kernels_kv4_gpu verify/test_verify_kv4_fp8_route_gpu; do
  timeout 200 /tmp/b/tests/$t > "$OUT/$(basename $t).log" 2>&1; echo "$t rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$OUT/$(basename $t).log"
done
export MLA_TOOLCHAIN_LIB_DIR=/tmp/b/tools/mla-bench PYTHONPATH=$PWD/python
for c in check_package_gpu check_kv_package_gpu; do
  python3 python/tests/$c.py > "$OUT/$c.log" 2>&1; echo "$c rc=$?"; grep "^\[FAIL\]" "$OUT/$c.log" | head; tail -1 "$OUT/$c.log"
done
for args in "--kv fp8 --heads 16" "--kv fp4 --heads 128"; do
  echo "== $args"; timeout 60 /tmp/b/tools/mla-bench/mla-bench --runs 20 --seqlen 8192 $args 2>&1 | grep -E "^  "
done
echo "total $(( $(date +%s) - T0 )) s"
