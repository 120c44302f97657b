#!/usr/bin/env bash
# One device call for the PyTorch package (docs/python.md): the package vs the CPU twins (BF16
# decode, then the quantised caches), FlashMLA's own dense-decoding test against the package
# (unmodified; FlashMLA checkout in $FLASHMLA), timings.
# LIB_DIR: a folder holding libmla_{decode,fp8,kv4}_capi.so built here beforehand; when one does
# not load, the libraries are built into build-dev. Logs and JSON go to $OUT (or ./out-python).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out-python}
mkdir -p "$OUT"
FLASHMLA=${FLASHMLA:-.peer/flashmla}
LIB_DIR=${LIB_DIR:-.carry/pyext-lib}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
if ! python3 -c "import ctypes, sys; [ctypes.CDLL(sys.argv[1] + f'/libmla_{c}_capi.so') for c in ('decode', 'fp8', 'kv4')]" \
    "$LIB_DIR" 2>>"$OUT/device.txt"; then
  echo "building libmla_{decode,fp8,kv4}_capi.so here" | tee -a "$OUT/device.txt"
  { cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DMLA_BUILD_TESTS=OFF &&
    cmake --build build-dev -j16 --target mla_decode_capi mla_fp8_capi mla_kv4_capi; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  LIB_DIR=build-dev/tools/mla-bench
fi
export MLA_TOOLCHAIN_LIB_DIR=$PWD/$LIB_DIR PYTHONPATH=$PWD/python
rc=0
python3 python/tests/check_package_gpu.py --json "$OUT/check_package_gpu.json" 2>&1 | tee "$OUT/check_package_gpu.log" || rc=1
python3 python/tests/check_kv_package_gpu.py --json "$OUT/check_kv_package_gpu.json" 2>&1 |
  tee "$OUT/check_kv_package_gpu.log" || rc=1
python3 python/tests/run_flashmla_dense_test.py --flashmla "$FLASHMLA" --max-seconds "${FLASHMLA_MAX_SECONDS:-200}" \
  --json "$OUT/flashmla_dense_test.json" > "$OUT/flashmla_dense_test.log" 2>&1 || rc=1
sed -n '/=== FlashMLA dense/,$p' "$OUT/flashmla_dense_test.log"; tail -3 "$OUT/flashmla_dense_test.log"
python3 python/tests/bench_package.py --json "$OUT/bench_package.json" 2>&1 | tee "$OUT/bench_package.log" || rc=1
exit $rc
