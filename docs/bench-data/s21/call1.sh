#!/usr/bin/env bash
# Session 21, call 1: where the FP4 cache's FP8 route spends its tile at <= 32 rows (narrow kernel).
# Run with the probe patch applied (docs/bench-data/s21/fp4-probe.patch: a device flag read from
# MLA_FP4_PROBE; bit 0 skips the FP4 -> FP8 conversion (outputs wrong, timing of the rest), bit 1
# runs the FP8 pages' S-ahead loop for FP4 too). One build, the kv4/fp8 GPU tests at probe 0, then
# peer_kv4.py --suite fp4 at probes 0-3 and Nsight Compute's stall samples at probe 0.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j14 --target mla_kv4_capi test_kernels_kv4_gpu >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
timeout 200 /tmp/b/tests/kernels/test_kernels_kv4_gpu > "$OUT/kv4_gpu.log" 2>&1; echo "kv4 gpu tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/kv4_gpu.log" | head -8
wait; tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for pr in 0 1 2 3 0; do
  echo "=== MLA_FP4_PROBE=$pr"
  MLA_FP4_PROBE=$pr timeout 200 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b/tools/mla-bench/libmla_kv4_capi.so \
    --suite fp4 --runs 9 --json "$OUT/probe$pr.json" 2>&1 | grep -E "device|fp8 route|^shape"
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MLA_FP4_PROBE=0 timeout 200 "$NCU" --kernel-name "regex:narrow_split" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
  --export /tmp/ncu_fp4 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b/tools/mla-bench/libmla_kv4_capi.so \
  --suite quick --runs 1 --warmup 0 > /tmp/ncu_run.log 2>&1; echo "ncu rc=$?"
"$NCU" --import /tmp/ncu_fp4.ncu-rep --page details > "$OUT/ncu_details.txt" 2>&1
"$NCU" --import /tmp/ncu_fp4.ncu-rep --page source --csv --print-source sass > /tmp/ncu_sass.csv 2>&1
python3 tools/mla-bench/ncu_stalls.py /tmp/ncu_sass.csv --top 40 --label "fp4 narrow H16 8K" > "$OUT/ncu_stalls.txt" 2>&1
grep -E "Duration|Issued|Eligible|Active Warps|No Eligible|Registers|Executed Ipc|Warp Cycles" "$OUT/ncu_details.txt" | head -20
head -60 "$OUT/ncu_stalls.txt"
echo "total $(( $(date +%s) - T0 )) s"
