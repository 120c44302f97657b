#!/usr/bin/env bash
# One device call: build the kernel targets, run the GPU tests (kernels + verify-decode through
# the kernels), then mla-bench on the shapes of docs/benchmarks.md ("Decode kernels"), each
# with its ceilings measured in the same process. The side-by-side timing against FlashMLA is
# tools/mla-bench/peer_flashmla.py (run_peer.sh runs both in one call).
# Usage (on the GPU machine, repo root): OUT=/some/dir bash tools/mla-bench/run_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT" /tmp/mla-json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/smi.txt" 2>&1
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target test_kernels_decode_gpu test_kernels_decode_twin test_verify_decode_gpu mla-bench >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
timeout 300 /tmp/b/tests/kernels/test_kernels_decode_gpu > "$OUT/gpu_test.log" 2>&1
echo "gpu test rc=$?"; grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|vs f64|Failure" "$OUT/gpu_test.log" | head -60
timeout 180 /tmp/b/tests/verify/test_verify_decode_gpu > "$OUT/verify_gpu.log" 2>&1
echo "verify-decode gpu test rc=$?"; grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|\[figure\]|Failure" "$OUT/verify_gpu.log" | head -40
BENCH=/tmp/b/tools/mla-bench/mla-bench
run() { local name=$1; shift; timeout 90 $BENCH "$@" --json "/tmp/mla-json/$name.json" 2>&1 | tee -a "$OUT/bench.log"; }
for L in 4096 8192 32768; do
  for H in 16 64 128; do
    for SQ in 1 2; do run h${H}_sq${SQ}_l$((L / 1024))k --batch 128 --heads $H --dc 512 --dr 64 --seqlen $L --page 64 --sq $SQ; done
  done
  run tpla_h128_dc256_l$((L / 1024))k --batch 128 --heads 128 --dc 256 --dr 64 --seqlen $L --page 64
  run tpla_h64_dc128_l$((L / 1024))k --batch 128 --heads 64 --dc 128 --dr 64 --seqlen $L --page 64
done
python3 -c "import json,glob; print(json.dumps({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/mla-json/*.json'))}, indent=1))" > "$OUT/bench.json"
echo "=== summary ==="; grep -E "^decode" "$OUT/bench.log"
