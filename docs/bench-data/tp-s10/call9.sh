#!/usr/bin/env bash
# Session 10, call 9 (nvidia-h200-x4): end to end with every layer's ranks on four GPUs (NCCL):
# verify-decode --perplexity --perplexity-path kernel --devices 4 on tiny-v3 (8 held-out windows,
# prefill 128 + decode 32) for TPLA tp=4 g=4 and g=2 (Hadamard, exact norm) and DCP over 4 GPUs;
# each end-to-end layer is checked against the one-device decode as it runs.
# Usage: OUT=dir [DEVICE=cuda|cpu] [BUILD=/tmp/bt] bash docs/bench-data/tp-s10/call9.sh
set -uo pipefail
DEVICE=${DEVICE:-cuda}; B=${BUILD:-/tmp/bt}; W=/tmp/e2e; mkdir -p $W "$OUT"
COMM=threads
if [ "$DEVICE" = cuda ]; then
  nvidia-smi -L; echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-(unset)}"; COMM=nccl
  export NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  t0=$(date +%s)
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a > $W/build.log 2>&1 &&
    cmake --build $B -j"$(nproc)" --target verify-decode mla-forward mla-convert >> $W/build.log 2>&1 || { tail -30 $W/build.log; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
T=$B/tools; m=tiny-v3
"$T/mla-forward/mla-forward" -q capture datasets/$m --out $W/cap.h5 --eval datasets/corpus/heldout.bin \
  --eval-seqs 8 --seq-len 256 --ref-seqs 1 --ref-len 16 || exit 1
for conv in g4 g2 dcp; do
  d=$W/$m-$conv; rm -rf $d
  if [ $conv = dcp ]; then "$T/mla-convert/mla-convert" -q --tp 1 --reparam identity -o $d datasets/$m || exit 1; extra=(--dcp)
  else "$T/mla-convert/mla-convert" -q --tp 4 --groups ${conv#g} --reparam hadamard --seed 3 --norm exact -o $d datasets/$m || exit 1; extra=(); fi
  echo "== $m $conv: end to end, ranks on 4 $DEVICE devices =="
  t1=$(date +%s)
  timeout 300 "$T/verify-decode/verify-decode" -q --original datasets/$m --converted $d --activations $W/cap.h5 \
    --prefill 128 --decode 32 --sequences 8 --layers 0 --device $DEVICE --devices 4 --comm $COMM "${extra[@]}" \
    --max-rel-l2 1 --max-cos-diff 1 --perplexity --perplexity-path kernel --json "$OUT/e2e-$m-$conv.json" 2>&1 | tee "$OUT/e2e-$m-$conv.txt"
  echo "rc=${PIPESTATUS[0]} ($(( $(date +%s) - t1 )) s)"
done
