#!/usr/bin/env bash
# Session 12, call 3 (nvidia-h200, carry .carry .peer): Nsight Compute on the reverted experiment
# (.carry/prod.patch = git diff 19b8b4a d41fa75 -- kernels/fp8_decode_rows64.cu: the producer-side FP4 conversion) and on the
# kept kernel, the 64-row FP8-route kernel at FP4 H = 64 8K (peer_kv4.py's first fp4rows shape):
# warp-state statistics and per-SASS-line stall samples, to see why four producer warps converted
# at half the rate of the eight P.V warps (docs/gpu-notes.md, session 12).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 0; }
rm -rf /tmp/exp && mkdir -p /tmp/exp && tar --exclude=./.carry --exclude=./.peer -cf - . | tar -C /tmp/exp -xf - &&
  (cd /tmp/exp && patch -s -p1 < "$OLDPWD/.carry/prod.patch") || { echo "patch failed"; exit 1; }
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_unpack.log" 2>&1; echo "peer rc=$?") &
for v in kept exp; do
  S=.; [ $v = exp ] && S=/tmp/exp
  cmake -S $S -B /tmp/b_$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build_$v.log" 2>&1 &&
    cmake --build /tmp/b_$v -j16 --target mla_kv4_capi >> "$OUT/build_$v.log" 2>&1 || { tail -20 "$OUT/build_$v.log"; exit 1; }
done
wait
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH}
for v in kept exp; do
  L=$(find /tmp/b_$v -name libmla_kv4_capi.so | head -1)
  timeout 240 "$NCU" --kernel-name "regex:rows64_split" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --export "$OUT/ncu_$v" python3 tools/mla-bench/peer_kv4.py --lib "$L" --suite fp4rows --runs 1 --warmup 0 \
    > "$OUT/ncu_run_$v.log" 2>&1
  echo "ncu $v rc=$?"
  "$NCU" --import "$OUT/ncu_$v.ncu-rep" --page details > "$OUT/ncu_${v}_details.txt" 2>&1
  "$NCU" --import "$OUT/ncu_$v.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${v}_sass.csv" 2>&1
  rm -f "$OUT/ncu_$v.ncu-rep"
  grep -E "Duration|Warp Cycles Per Issued|Issued Warp|No Eligible|Eligible Warps" "$OUT/ncu_${v}_details.txt" | head -8
done
cd "$OUT" && tar czf ncu_sass.tar.gz ncu_*_sass.csv && rm -f ncu_*_sass.csv
