#!/usr/bin/env bash
# Session 25, call 6: the split 64-row FP8 kernel, its copier in warp 8 (a P.V warp) at the P.V tile start; FP8 GPU
# tests, our many-head timings alone (no peer: call 2 has them), and its timeline at H = 128 8K.
# Usage (GPU machine, repo root): OUT=dir bash docs/bench-data/s25/call3.sh
set -uo pipefail
OUT=${OUT:-/tmp/s25}
mkdir -p "$OUT"
echo "start $(date +%T)"
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j8 --target mla_fp8_capi test_kernels_fp8_gpu >> "$OUT/build.log" 2>&1; echo "ours rc=$? $(date +%T)" ) &
( cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > "$OUT/build_tl.log" 2>&1 &&
  cmake --build /tmp/bt -j8 --target mla_fp8_capi >> "$OUT/build_tl.log" 2>&1; echo "timeline build rc=$? $(date +%T)" ) &
wait
timeout 150 /tmp/b/tests/kernels/test_kernels_fp8_gpu > "$OUT/test_kernels_fp8_gpu.log" 2>&1
echo "fp8 tests rc=$? $(date +%T)"; grep -E "^\[(  PASSED|  FAILED)|Failure" "$OUT/test_kernels_fp8_gpu.log" | head
export PYTHONUNBUFFERED=1
python3 - "$OUT" <<'PY'
import sys, statistics, torch
sys.path.insert(0, "tools/mla-bench")
from peer_flashmla import Case, Timer, interleaved_times, summarize
from peer_fp8 import Ours
ours, timer = Ours("/tmp/b/tools/mla-bench/libmla_fp8_capi.so"), Timer()
for i, (H, sq, L) in enumerate([(64, 1, 8192), (128, 1, 8192), (128, 2, 8192), (128, 1, 32768)]):
    c = Case(128, H, sq, 512, 64, L, 64, seed=3000 + i)
    run, parts = ours.prepare(c)
    med, rng = summarize(interleaved_times(timer, [run], 15, 3))
    print(f"H{H} s_q{sq} L{L // 1024}k: {med[0]:.1f} us ({rng[0][0]:.1f}-{rng[0][1]:.1f}), {parts} parts", flush=True)
    del c, run
    torch.cuda.empty_cache()
PY
timeout 120 python3 tools/mla-bench/timeline.py --kernel fp8-rows64 --lib /tmp/bt/tools/mla-bench/libmla_fp8_capi.so \
  --heads 128 --json "$OUT/timeline.json" 2>&1 | tee "$OUT/timeline.txt"
echo "done $(date +%T)"
