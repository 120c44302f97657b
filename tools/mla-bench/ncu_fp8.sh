#!/usr/bin/env bash
# Nsight Compute profile of our FP8 split kernels on one peer_fp8.py shape (GPU machine, repo root,
# after run_fp8_device.sh built $BIN): warp-state and scheduler statistics plus the per-SASS-line
# stall samples of the narrow (<= 32 rows) or 64-row split kernel, and the kernels' SASS.
# Usage: OUT=dir BIN=/tmp/fp8bin SHAPE=B128_H16_sq1_L8k_dc512 KERNEL=narrow_split bash tools/mla-bench/ncu_fp8.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
BIN=${BIN:-/tmp/fp8bin}
SHAPE=${SHAPE:-B128_H16_sq1_L8k_dc512}
KERNEL=${KERNEL:-narrow_split}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 0; }
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH}
tag=${SHAPE}_${KERNEL}
timeout 200 "$NCU" --kernel-name "regex:$KERNEL" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  --section SourceCounters --section Occupancy --export "$OUT/ncu_$tag" \
  python3 tools/mla-bench/peer_fp8.py --lib "$BIN/libmla_fp8_capi.so" --only "$SHAPE" --runs 1 --warmup 0 \
  > /tmp/ncu_run.log 2>&1
echo "ncu rc=$?"; tail -5 /tmp/ncu_run.log
"$NCU" --import "$OUT/ncu_$tag.ncu-rep" --page details > "$OUT/ncu_${tag}_details.txt" 2>&1
"$NCU" --import "$OUT/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${tag}_sass.csv" 2>&1
rm -f "$OUT/ncu_$tag.ncu-rep"
grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Eligible|Active Warps|No Eligible|Registers" "$OUT/ncu_${tag}_details.txt" | head -40
