#!/usr/bin/env bash
# Session 10, call 7 (nvidia-h200-x4): more runs of mla-bench --tp 2 on GPUs 0,1 (three, for the
# spread of issue 14's figures on H200s) and one more --tp 4 with tpla-g2.
set -uo pipefail
R=/tmp/o; mkdir -p $R; B=/tmp/bt
nvidia-smi -L; echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-(unset)}"
export NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a > $R/build.log 2>&1 &&
  cmake --build $B -j"$(nproc)" --target mla-bench >> $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for run in tp2a tp4c tp2b tp2c; do
  tp=${run:2:1}; env=(); modes=(--mode head-parallel --mode tpla --mode dcp)
  if [ $tp = 2 ]; then env=(CUDA_VISIBLE_DEVICES=0,1); else modes+=(--mode tpla-g2); fi
  echo "== mla-bench --tp $tp ($run) =="
  env "${env[@]}" timeout 200 $B/tools/mla-bench/mla-bench --tp $tp "${modes[@]}" --batch 128 --seqlens 8192 32768 --runs 30 \
    --json $R/$run-bench.json > $R/$run-bench.txt 2>&1; echo "rc=$?"; grep -E "^(GPU|NCCL|head|tpla|dcp)" $R/$run-bench.txt | grep -v "^[a-z-]* *[0-9]* *$"
done
tar czf "$OUT/tp-s10-call7.tgz" -C $R .
