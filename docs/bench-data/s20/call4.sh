#!/usr/bin/env bash
# Session 20, call 4 (nvidia-h200): the CUDA side of this session's verify refactors: verify-decode
# --shared-prefix --device cuda on both tiny models (shared_prefix_params.hpp now fills the
# kernels' parameters) and --device cuda on a tp 2 conversion (multi_device_runner's helpers run
# only with --devices: covered by the CPU test), plus the prefix kernels' GPU tests.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /tmp/cfg.log 2>&1 &&
  cmake --build /tmp/b -j16 --target verify-decode mla-forward mla-convert test_kernels_prefix_gpu > /tmp/build.log 2>&1 ||
  { grep -E "error" /tmp/build.log | head; tail -5 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
timeout 150 /tmp/b/tests/kernels/test_kernels_prefix_gpu > "$OUT/prefix_gpu_test.log" 2>&1; echo "prefix gpu test rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/prefix_gpu_test.log" | head
T=/tmp/b/tools
for M in tiny-v3 tiny-v2; do
  W=/tmp/sp-$M; mkdir -p $W
  $T/mla-forward/mla-forward -q capture datasets/$M --out $W/cap.h5 --eval docs/math.md --eval-seqs 4 --seq-len 48 &&
    $T/mla-convert/mla-convert -q --tp 1 -o $W/tp1 datasets/$M || { echo "capture/convert $M failed"; continue; }
  for dev in cuda cpu; do
    timeout 120 $T/verify-decode/verify-decode --original datasets/$M --converted $W/tp1 --activations $W/cap.h5 \
      --prefill 40 --decode 8 --sequences 4 --layers 0,5 --shared-prefix 33 --device $dev 2>&1 | grep -v "^\["
    echo "verify-decode --shared-prefix $M $dev rc=${PIPESTATUS[0]}"
  done
done
echo "call total $(( $(date +%s) - T0 )) s"
