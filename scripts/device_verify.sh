#!/usr/bin/env bash
# One GPU-machine call: build the CUDA tools, run verify-decode's GPU test, then the TPLA sweep
# (scripts/tpla_sweep.sh) with the decode kernels. Needs datasets/corpus/{calib,heldout}.bin
# (carried; built here by datasets/corpus/build_corpus.py). Usage: OUT=dir bash scripts/device_verify.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device-verify}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/smi.txt" 2>&1
cmake -S . -B /tmp/bv -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/bv -j16 --target verify-decode mla-forward mla-calibrate mla-convert test_verify_decode_gpu \
    >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
/tmp/bv/tests/verify/test_verify_decode_gpu > "$OUT/verify_gpu_test.log" 2>&1
echo "verify-decode gpu test rc=$?"; grep -E "figure|PASSED|FAILED|SKIPPED" "$OUT/verify_gpu_test.log"
BUILD_DIR=/tmp/bv DEVICE=cuda OUT=/tmp/sweep MODELS="${MODELS:-tiny-v3}" TPS="${TPS:-2}" bash scripts/tpla_sweep.sh 2>&1 | tee "$OUT/sweep.txt"
