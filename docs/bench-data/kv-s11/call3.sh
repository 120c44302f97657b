#!/usr/bin/env bash
# Session 11, call 3 (nvidia-h200, carry .carry): the P block scale's lower bound (de8da46) on
# the GPU: the FP8, 4-bit and verify fp8-route GPU tests, then an A/B in alternated processes
# (base = the tree with .carry/sigma.patch reversed) with mla-bench --kv. Predicted: no change
# beyond the process spread (one fmaxf per row and tile against ~1,170 instructions per warp and
# tile).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
rm -rf /tmp/base && mkdir -p /tmp/base && tar --exclude=./.carry -cf - . | tar -C /tmp/base -xf - &&
  (cd /tmp/base && patch -s -R -p1 < "$OLDPWD/.carry/sigma.patch") || { echo "base tree failed"; exit 1; }
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla-bench test_kernels_fp8_gpu test_kernels_kv4_gpu test_verify_kv4_fp8_route_gpu \
    >> "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "new built $(( $(date +%s) - T0 )) s"
(cmake -S /tmp/base -B /tmp/bb -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build_base.log" 2>&1 &&
  cmake --build /tmp/bb -j16 --target mla-bench >> "$OUT/build_base.log" 2>&1) &
BASE_PID=$!
for t in kernels/test_kernels_fp8_gpu kernels/test_kernels_kv4_gpu verify/test_verify_kv4_fp8_route_gpu; do
  timeout 300 /tmp/b/tests/$t > "$OUT/$(basename $t).log" 2>&1
  echo "$t rc=$? ($(( $(date +%s) - T0 )) s)"
  grep -E "^\[  (PASSED|FAILED)|very cold|Failure" "$OUT/$(basename $t).log" | head -12
done
wait $BASE_PID || { echo "base build failed"; grep -E "error|FAILED" "$OUT/build_base.log" | head; exit 1; }
echo "base built $(( $(date +%s) - T0 )) s"
for rep in 1 2; do
  for v in base new; do
    B=/tmp/b; [ $v = base ] && B=/tmp/bb
    for args in "--kv fp8 --heads 16" "--kv fp8 --heads 128" "--kv fp8 --heads 128 --dc 256" "--kv fp4 --heads 16"; do
      echo "== $v rep $rep: $args"
      timeout 120 $B/tools/mla-bench/mla-bench --runs 30 --no-ceilings --seqlen 8192 $args 2>&1 | grep -E "^  (fp8|fp4 \(fp8)"
    done
  done
done
echo "total $(( $(date +%s) - T0 )) s"
