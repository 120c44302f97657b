#!/usr/bin/env bash
# One device call for the side-by-side comparison with FlashMLA: build our kernels (the GPU test
# binaries and the C entry point peer_flashmla.py loads), run every GPU test of the decode
# kernels and verify-decode's GPU test, then time ours and FlashMLA interleaved in one process
# (tools/mla-bench/peer_flashmla.py), ceilings measured in the same process.
# FlashMLA: a local build in the git-ignored .peer/flashmla (carry it; docs/benchmarks.md says
# which commit), imported through PYTHONPATH.
# Usage (GPU machine, repo root): OUT=/some/dir bash tools/mla-bench/run_peer.sh [issue10|quick] [variant...]
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
SUITE=${1:-issue10}
shift || true
VARIANTS=${*:-0}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi test_kernels_decode_gpu >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
# verify-decode's GPU test needs most of lib/: built on its own, so a break elsewhere only skips it
cmake --build /tmp/b -j16 --target test_verify_decode_gpu > "$OUT/build_verify.log" 2>&1 || echo "verify-decode GPU test did not build (build_verify.log)"
echo "build done: $(date +%T)"
timeout 300 /tmp/b/tests/kernels/test_kernels_decode_gpu > "$OUT/gpu_test.log" 2>&1
echo "gpu test rc=$? ($(date +%T))"; grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|vs f64|Failure|wrong" "$OUT/gpu_test.log" | cut -c1-220 | head -60
timeout 120 /tmp/b/tests/kernels/test_kernels_decode_gpu --gtest_filter='*GraphCapture*:*BadPageId*' --gtest_repeat=3 > "$OUT/gpu_test_repeat.log" 2>&1
echo "graph/bad-page tests x3 rc=$?"; grep -E "^\[  (PASSED|FAILED) " "$OUT/gpu_test_repeat.log" | sort | uniq -c
timeout 200 /tmp/b/tests/verify/test_verify_decode_gpu > "$OUT/verify_gpu.log" 2>&1
echo "verify-decode gpu test rc=$? ($(date +%T))"; grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|Failure" "$OUT/verify_gpu.log" | head -20
export PYTHONPATH=$PWD/.peer/flashmla${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for v in $VARIANTS; do
  timeout 300 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
    --suite "$SUITE" --variant "$v" --json "$OUT/peer_v$v.json" 2>&1 | tee "$OUT/peer_v$v.log"
done
echo "done: $(date +%T)"
for v in $VARIANTS; do echo "=== variant $v ==="; grep -vE "^device|^shape" "$OUT/peer_v$v.log" | cut -c1-120; done
