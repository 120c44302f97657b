#!/usr/bin/env bash
# One device call for shared-prefix (TyphoonMLA) decode: build, the GPU tests of the prefix
# kernels, verify-decode --shared-prefix through the kernels on both tiny models, then
# mla-bench --prefix (mixed vs absorb-only, crossover vs B_theta, ceilings in the same process)
# and FlashMLA's absorb-only kernel on the same shapes (tools/mla-bench/prefix_flashmla.py, same
# call).
# Usage (GPU machine, repo root, .peer carried): OUT=/some/dir bash tools/mla-bench/run_prefix.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv 2>&1
bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1 || echo "FlashMLA peer unpack failed: $(tail -3 "$OUT/peer_unpack.log")"
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target test_kernels_prefix_gpu mla-bench >> "$OUT/build.log" 2>&1 ||
  { grep -B2 -A8 -E "error|Error" "$OUT/build.log" | head -60; exit 1; }
stamp "kernels + bench built"
cmake --build /tmp/b -j16 --target verify-decode mla-forward mla-convert >> "$OUT/build.log" 2>&1 ||
  { echo "verify-decode build failed:"; grep -B2 -A8 error "$OUT/build.log" | head -30; }
stamp "build done"
timeout 150 /tmp/b/tests/kernels/test_kernels_prefix_gpu > "$OUT/prefix_gpu_test.log" 2>&1
echo "prefix gpu test rc=$?"
grep -E "^\[(  PASSED|  FAILED|  SKIPPED|       OK)|Failure|gpu vs|Expected|actual|Which is" "$OUT/prefix_gpu_test.log" | cut -c1-240 | head -60
stamp "tests done"
T=/tmp/b/tools
for M in tiny-v3 tiny-v2; do
  W=/tmp/sp-$M; mkdir -p $W
  $T/mla-forward/mla-forward -q capture datasets/$M --out $W/cap.h5 --eval docs/math.md --eval-seqs 4 --seq-len 48 &&
    $T/mla-convert/mla-convert -q --tp 1 -o $W/tp1 datasets/$M &&
    for dev in cuda $([ $M = tiny-v3 ] && echo cpu); do
      timeout 120 $T/verify-decode/verify-decode --original datasets/$M --converted $W/tp1 --activations $W/cap.h5 \
        --prefill 40 --decode 8 --sequences 4 --layers 0,5 --shared-prefix 33 --device $dev --json /tmp/vsp_${M}_$dev.json 2>&1 | grep -v "^\["
      echo "verify-decode --shared-prefix $M $dev rc=${PIPESTATUS[0]}"; cat /tmp/vsp_${M}_$dev.json >> "$OUT/verify_shared_prefix.json"
    done
done
stamp "verify done; bench start"
timeout 240 /tmp/b/tools/mla-bench/mla-bench --prefix --runs 15 --crossover-batches 8 16 24 32 40 48 56 96 --json "$OUT/prefix_bench.json" 2>&1 | tee "$OUT/prefix_bench.log"
stamp "flashmla start"
export PYTHONPATH=$PWD/.peer/flashmla${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 120 python3 tools/mla-bench/prefix_flashmla.py --runs 15 --json "$OUT/prefix_flashmla.json" 2>&1 | tee "$OUT/prefix_flashmla.log"
stamp "done"
