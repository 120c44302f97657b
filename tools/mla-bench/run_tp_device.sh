#!/usr/bin/env bash
# One call on a machine with >= TP GPUs (nvidia-h200-x2 for TP=2, nvidia-h200-x4 for TP=4): build, the
# multi-device tests, verify-decode on the trained tiny models with each TPLA rank on its own GPU (NCCL;
# every latent group count in LGROUPS, exact and approx norm) and with DCP (tokens shared by the GPUs),
# then mla-bench --tp TP (head-parallel / tpla / tpla-g<g> / dcp layer step at 8K and 32K, capacity view).
# NCCL_NVLS_ENABLE is left as the machine sets it (0: NVLink multicast off). Needs
# datasets/corpus/heldout.bin (carried). With fewer than TP GPUs the ranks share the GPUs (threads).
# Usage (repo root): OUT=dir [TP=2] [LGROUPS="TP"] [DEVICE=cuda] [BUILD=/tmp/bt]
#   bash tools/mla-bench/run_tp_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/tp-out}
BUILD=${BUILD:-/tmp/bt}
DEVICE=${DEVICE:-cuda}
TP=${TP:-2}
LGROUPS=${LGROUPS:-$TP}
# mla-bench --tp modes: every latent group count of LGROUPS below TP as tpla-g<g> besides plain tpla.
BENCH_MODES="head-parallel tpla"
for g in $LGROUPS; do [ "$g" -lt "$TP" ] && BENCH_MODES="$BENCH_MODES tpla-g$g"; done
BENCH_MODES="$BENCH_MODES dcp"
mkdir -p "$OUT" /tmp/tp-work
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-(unset)}"
if [ "$DEVICE" = cuda ]; then
  { nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv; } > "$OUT/topo.txt" 2>&1
  cat "$OUT/topo.txt"
  # NCCL beside the CUDA toolkit, else PyTorch's pip wheel (nvidia-nccl-cu13).
  if [ -z "${NCCL_ROOT:-}" ] && ! ls /usr/local/cuda/lib*/libnccl.so* > /dev/null 2>&1; then
    NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2> /dev/null) && export NCCL_ROOT
  fi
  echo "NCCL_ROOT=${NCCL_ROOT:-(toolkit)}"
  NGPU=$(nvidia-smi -L | grep -c '^GPU')
  # One GPU: both ranks share it and sum in process; mla-bench times rank 0 alone.
  if [ "$NGPU" -ge "$TP" ]; then COMM=nccl; ONE=(); else COMM=threads; ONE=(--tp-one-gpu); fi
  echo "GPUs: $NGPU, tp $TP, ranks' communicator: $COMM"
  t0=$(date +%s)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target mla-bench verify-decode mla-forward mla-convert test_multi_device test_multi_device_gpu \
      >> "$OUT/build.log" 2>&1 || { grep -i nccl "$OUT/build.log"; tail -40 "$OUT/build.log"; exit 1; }
  grep -i "nccl" "$OUT/build.log" | head -3
  echo "build: $(( $(date +%s) - t0 )) s"
  timeout 150 "$BUILD/tests/verify/test_multi_device_gpu" > "$OUT/multi_device_gpu_test.log" 2>&1
  echo "test_multi_device_gpu rc=$?"; grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|\[figure\]|Failure|rror" "$OUT/multi_device_gpu_test.log" | head -20
fi
timeout 120 "$BUILD/tests/verify/test_multi_device" > "$OUT/multi_device_test.log" 2>&1
echo "test_multi_device rc=$?"; grep -E "^\[(  PASSED|  FAILED)|Failure" "$OUT/multi_device_test.log" | head

T=$BUILD/tools
for m in tiny-v2 tiny-v3; do
  "$T/mla-forward/mla-forward" -q capture "datasets/$m" --out "/tmp/tp-work/$m-cap.h5" --eval datasets/corpus/heldout.bin \
    --eval-seqs 8 --seq-len 256 --ref-seqs 1 --ref-len 16 || exit 1
  for g in $LGROUPS; do
    for norm in exact approx; do
      tag=tp$TP-g$g-$norm
      d=/tmp/tp-work/$m-$tag
      rm -rf "$d"
      "$T/mla-convert/mla-convert" -q --tp "$TP" --groups "$g" --reparam hadamard --seed 3 --norm $norm -o "$d" "datasets/$m" || exit 1
      echo "== verify-decode $m tp=$TP g=$g hadamard $norm: ranks on $TP ${DEVICE} devices =="
      timeout 120 "$T/verify-decode/verify-decode" -q --original "datasets/$m" --converted "$d" \
        --activations "/tmp/tp-work/$m-cap.h5" --prefill 128 --decode 32 --sequences 4 --device "$DEVICE" --devices "$TP" \
        --comm "${COMM:-threads}" --max-rel-l2 1 --max-cos-diff 1 --json "$OUT/verify-$m-$tag.json" | tee "$OUT/verify-$m-$tag.txt"
      echo "rc=${PIPESTATUS[0]}"
    done
  done
  d=/tmp/tp-work/$m-tp1
  rm -rf "$d"
  "$T/mla-convert/mla-convert" -q --tp 1 --reparam identity -o "$d" "datasets/$m" || exit 1
  echo "== verify-decode $m DCP: tokens shared by $TP ${DEVICE} devices, LSE merge across them =="
  timeout 120 "$T/verify-decode/verify-decode" -q --original "datasets/$m" --converted "$d" \
    --activations "/tmp/tp-work/$m-cap.h5" --prefill 128 --decode 32 --sequences 4 --device "$DEVICE" --devices "$TP" \
    --comm "${COMM:-threads}" --dcp --json "$OUT/verify-$m-dcp$TP.json" | tee "$OUT/verify-$m-dcp$TP.txt"
  echo "rc=${PIPESTATUS[0]}"
done

if [ "$DEVICE" = cuda ]; then
  echo "== mla-bench --tp $TP =="
  modes=(); for m in $BENCH_MODES; do modes+=(--mode "$m"); done
  timeout 200 "$T/mla-bench/mla-bench" --tp "$TP" "${modes[@]}" --batch 128 --seqlens 8192 32768 --runs 30 "${ONE[@]}" \
    --json "$OUT/tp$TP-bench.json" 2>&1 | tee "$OUT/tp$TP-bench.txt"
fi
