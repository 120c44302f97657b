#!/usr/bin/env bash
# Session 11, call 5 (nvidia-h200): the PyTorch package's two device checks after they moved their
# shared helpers into python/tests/check_common.py.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi mla_fp8_capi mla_kv4_capi >> "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export MLA_TOOLCHAIN_LIB_DIR=/tmp/b/tools/mla-bench PYTHONPATH=$PWD/python
for c in check_package_gpu check_kv_package_gpu; do
  python3 python/tests/$c.py > "$OUT/$c.log" 2>&1; echo "$c rc=$?"
  grep -c "^\[PASS\]" "$OUT/$c.log"; grep "^\[FAIL\]" "$OUT/$c.log" | head; tail -2 "$OUT/$c.log"
done
echo "total $(( $(date +%s) - T0 )) s"
