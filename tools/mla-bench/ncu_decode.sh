#!/usr/bin/env bash
# Nsight Compute side by side: FlashMLA's dense decode kernel and our BF16 split kernel on the same
# peer_flashmla.py shape (GPU machine, repo root, after run_peer.sh built /tmp/b and
# peer_unpack.sh built .peer/flashmla). Speed-of-light, compute (pipe utilisation), memory
# (L2 / shared / DRAM) and warp-state sections of one launch of each, so the limiter of a shape
# can be compared with the peer's on the same data.
# Usage: OUT=dir SHAPES="h128_sq1_l8k tpla_tp2_h128_dc256_l32k" bash tools/mla-bench/ncu_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
LIB=${LIB:-/tmp/b/tools/mla-bench/libmla_decode_capi.so}
SHAPES=${SHAPES:-h128_sq1_l8k}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 0; }
export PYTHONPATH=$PWD/.peer/flashmla${PYTHONPATH:+:$PYTHONPATH}
for shape in $SHAPES; do
  for who in flashmla ours; do
    if [ $who = flashmla ]; then re='flash_fwd_splitkv_mla'; else re='decode_split_v'; fi
    tag=ncu_${shape}_$who
    timeout 240 "$NCU" --kernel-name "regex:$re" --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
      --export "$OUT/$tag" \
      python3 tools/mla-bench/peer_flashmla.py --lib "$LIB" --only "$shape" --runs 1 --warmup 1 --no-ceilings \
      > "$OUT/${tag}_run.log" 2>&1
    echo "ncu $shape $who rc=$?"
    "$NCU" --import "$OUT/$tag.ncu-rep" --page details > "$OUT/${tag}.txt" 2>&1
    rm -f "$OUT/$tag.ncu-rep"
    grep -E "Duration|SM Frequency|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Shared|Tensor|Issue Slots|Registers Per|Grid Size|Block Size|Cluster|Warp Cycles Per Issued|No Eligible|L2 Hit|Mem Busy|Max Bandwidth|Pipe" "$OUT/${tag}.txt" | head -40
  done
done
