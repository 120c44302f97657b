#!/usr/bin/env bash
# One device call: build the kernel targets, run the GPU tests (kernels + verify-decode through
# the kernels), then every benchmark shape of docs/benchmarks.md ("Decode kernels"), each with
# its ceilings measured in the same process. H <= 16 shapes are timed for the current kernels
# and the comparison variants below (v2 as committed before v3 included), all in this one call.
# Usage (on the GPU machine, repo root): OUT=/some/dir bash tools/mla-bench/run_device.sh [quick]
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
MODE=${1:-full}
mkdir -p "$OUT" /tmp/mla-json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/smi.txt" 2>&1
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target test_kernels_decode_gpu test_kernels_decode_twin test_verify_decode_gpu mla-bench >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
timeout 240 /tmp/b/tests/kernels/test_kernels_decode_gpu > "$OUT/gpu_test.log" 2>&1
echo "gpu test rc=$?"; grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|vs f64|Failure" "$OUT/gpu_test.log" | head -40
timeout 180 /tmp/b/tests/verify/test_verify_decode_gpu > "$OUT/verify_gpu.log" 2>&1
echo "verify-decode gpu test rc=$?"; grep -E "^\[(  PASSED|  FAILED|  SKIPPED)|\[figure\]|Failure" "$OUT/verify_gpu.log" | head -40
BENCH=/tmp/b/tools/mla-bench/mla-bench
run() { local name=$1; shift; timeout 90 $BENCH "$@" --json "/tmp/mla-json/$name.json" 2>&1 | tee -a "$OUT/bench.log"; }
H16="--batch 128 --heads 16 --dc 512 --dr 64 --page 64"
# 0 = current default (v3b: 2 CTAs/SM x 2 stages); 3 = same with ring cycle counters;
# 5 = v3b without the per-tile shortcuts (commit 7a142ce); 4 = v3a (1 CTA/SM x 5 stages);
# 6 = v3 with the splits merged inside the split kernel (experiment, slower);
# 1 = v3b kernels + v2 scheduler; 2 = v2 as committed before v3. Variants 0, 5 and 2 run three
# times each (separate processes, interleaved): run-to-run spread is several percent.
# (Run before: v3a without PDL, pages in pool order: docs/gpu-notes.md.)
# many: only the many-head shapes: the default (v6, wgmma with 64-token tiles) against v4
# (variant 9, wgmma with 32-token tiles) and the v3 mma.sync 64-row path (variant 7), interleaved.
if [ "$MODE" = many ]; then
  # second GPU-test pass in the same process set: the v4 failures were history-dependent
  timeout 240 /tmp/b/tests/kernels/test_kernels_decode_gpu --gtest_repeat=2 > "$OUT/gpu_test_repeat.log" 2>&1
  echo "gpu test x2 rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$OUT/gpu_test_repeat.log" | sort | uniq -c
  for rep in 1 2; do
    for v in 0 9 7; do
      tb=""; [ $v = 0 ] && [ $rep = 1 ] && tb="--torch-baseline"
      run h128_l8k_v${v}_r$rep --batch 128 --heads 128 --dc 512 --dr 64 --seqlen 8192 --page 64 --variant $v $tb
      run tpla_h128_dc256_l8k_v${v}_r$rep  --batch 128 --heads 128 --dc 256 --dr 64 --seqlen 8192 --page 64 --variant $v
      run hp_h64_dc512_l8k_v${v}_r$rep     --batch 128 --heads 64 --dc 512 --dr 64 --seqlen 8192 --page 64 --variant $v
      run tpla_h128_dc256_l32k_v${v}_r$rep --batch 128 --heads 128 --dc 256 --dr 64 --seqlen 32768 --page 64 --variant $v
      run hp_h64_dc512_l32k_v${v}_r$rep    --batch 128 --heads 64 --dc 512 --dr 64 --seqlen 32768 --page 64 --variant $v
      run h16_l4k_mtp_v${v}_r$rep --batch 128 --heads 16 --dc 512 --dr 64 --seqlen 4096 --page 64 --sq 2 --variant $v
    done
  done
  for L in 4096 8192 32768; do run h16_l$((L / 1024))k_v0 $H16 --seqlen $L; done  # unchanged path, same run
  python3 -c "import json,glob; print(json.dumps({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/mla-json/*.json'))}, indent=1))" > "$OUT/bench.json"
  echo "=== summary ==="; grep -E "^decode|^pytorch" "$OUT/bench.log"
  exit 0
fi
for rep in 1 2 3; do
  for v in 0 5 2; do
    tb=""; [ $v = 0 ] && [ $rep = 1 ] && tb="--torch-baseline"
    for L in 4096 8192 32768; do run h16_l$((L / 1024))k_v${v}_r$rep $H16 --seqlen $L --variant $v $tb; done
  done
done
for v in 3 4 6 1; do
  for L in 4096 8192 32768; do run h16_l$((L / 1024))k_v$v $H16 --seqlen $L --variant $v; done
done
if [ "$MODE" = full ]; then
  run h128_l8k_v0  --batch 128 --heads 128 --dc 512 --dr 64 --seqlen 8192 --page 64 --torch-baseline
  run h128_l8k_v8  --batch 128 --heads 128 --dc 512 --dr 64 --seqlen 8192 --page 64 --variant 8
  run h128_l8k_v2  --batch 128 --heads 128 --dc 512 --dr 64 --seqlen 8192 --page 64 --variant 2
  run tpla_h128_dc256_l8k  --batch 128 --heads 128 --dc 256 --dr 64 --seqlen 8192 --page 64
  run hp_h64_dc512_l8k     --batch 128 --heads 64 --dc 512 --dr 64 --seqlen 8192 --page 64
  run tpla_h128_dc256_l32k --batch 128 --heads 128 --dc 256 --dr 64 --seqlen 32768 --page 64
  run hp_h64_dc512_l32k    --batch 128 --heads 64 --dc 512 --dr 64 --seqlen 32768 --page 64
  run h16_l8k_varied --batch 128 --heads 16 --dc 512 --dr 64 --seqlen 8192 --page 64 --varied
  run h16_l4k_p128   --batch 128 --heads 16 --dc 512 --dr 64 --seqlen 4096 --page 128
  run h16_l4k_mtp    --batch 128 --heads 16 --dc 512 --dr 64 --seqlen 4096 --page 64 --sq 2
  run h16_l4k_mtp_v2 --batch 128 --heads 16 --dc 512 --dr 64 --seqlen 4096 --page 64 --sq 2 --variant 2
fi
python3 -c "import json,glob; print(json.dumps({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/mla-json/*.json'))}, indent=1))" > "$OUT/bench.json"
echo "=== summary ==="; grep -E "^decode|^pytorch|^v3 ring" "$OUT/bench.log"
