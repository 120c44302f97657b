#!/usr/bin/env bash
# Session 10, call 2 (nvidia-h200-x4): after the per-device shared-memory fix: build, the decode GPU
# tests (the new every-device case included) and the multi-device tests, then mla-bench --tp 4 twice
# and --tp 2 (GPUs 0,1) once, alternating.
set -uo pipefail
R=/tmp/o; mkdir -p $R; B=/tmp/bt
nvidia-smi -L; echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-(unset)}"
export NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a > $R/build.log 2>&1 &&
  cmake --build $B -j"$(nproc)" --target mla-bench test_kernels_decode_gpu test_multi_device_gpu >> $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
timeout 200 $B/tests/kernels/test_kernels_decode_gpu > $R/decode_gpu_test.log 2>&1; echo "test_kernels_decode_gpu rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|EveryDevice" $R/decode_gpu_test.log | head
timeout 150 $B/tests/verify/test_multi_device_gpu > $R/multi_device_gpu_test.log 2>&1; echo "test_multi_device_gpu rc=$?"
for run in tp4a tp2 tp4b; do
  tp=${run:2:1}; env=(); [ $tp = 2 ] && env=(CUDA_VISIBLE_DEVICES=0,1)
  echo "== mla-bench --tp $tp ($run) =="
  env "${env[@]}" timeout 200 $B/tools/mla-bench/mla-bench --tp $tp --batch 128 --seqlens 8192 32768 --runs 30 \
    --json $R/$run-bench.json > $R/$run-bench.txt 2>&1; echo "rc=$?"; cat $R/$run-bench.txt
done
tar czf "$OUT/tp-s10-call2.tgz" -C $R .
