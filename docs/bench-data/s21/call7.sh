#!/usr/bin/env bash
# Session 21, call 7: the final tree on the GPU: the decode, FP8 and 4-bit GPU tests, and the
# timeline readers (one MLA_CAPI_READ_TIMELINE body since 13a4661) on v6, the FP8 narrow kernel
# and the FP4 route, from a -DMLA_TIMELINE=ON build.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1
cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON >> "$OUT/build.log" 2>&1
cmake --build /tmp/bt -j6 --target mla_kv4_capi mla_fp8_capi mla_decode_capi > "$OUT/buildt.log" 2>&1 & pt=$!
cmake --build /tmp/b -j10 --target test_kernels_decode_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
for t in test_kernels_decode_gpu test_kernels_fp8_gpu test_kernels_kv4_gpu; do
  timeout 200 /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$t.log" | head -6
done
wait $pt || { tail "$OUT/buildt.log"; exit 1; }
export PYTHONUNBUFFERED=1
L=/tmp/bt/tools/mla-bench
python3 tools/mla-bench/timeline.py --kernel fp4-narrow --lib $L/libmla_kv4_capi.so --heads 16 2>&1 | head -12
python3 tools/mla-bench/timeline.py --kernel fp8-narrow --lib $L/libmla_fp8_capi.so --heads 16 2>&1 | head -4
python3 tools/mla-bench/timeline.py --kernel v6 --lib $L/libmla_decode_capi.so --heads 128 2>&1 | head -4
echo "total $(( $(date +%s) - T0 )) s"
