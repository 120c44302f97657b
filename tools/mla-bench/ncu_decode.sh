#!/usr/bin/env bash
# Nsight Compute side by side: FlashMLA's dense decode kernel and our BF16 split kernel on the same
# peer_flashmla.py shape (GPU machine, repo root, after run_peer.sh built /tmp/b and
# peer_unpack.sh built .peer/flashmla). Speed-of-light, compute (pipe utilisation), memory
# (L2 / shared / DRAM) and warp-state sections of one launch of each, so the limiter of a shape
# can be compared with the peer's on the same data.
# Usage: OUT=dir SHAPES="h128_sq1_l8k tpla_tp2_h128_dc256_l32k" [VARIANT=8] [WHO="flashmla ours"] [SASS=1] \
#          bash tools/mla-bench/ncu_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
LIB=${LIB:-/tmp/b/tools/mla-bench/libmla_decode_capi.so}
SHAPES=${SHAPES:-h128_sq1_l8k}
VARIANT=${VARIANT:-0}
WHO=${WHO:-flashmla ours}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 0; }
export PYTHONPATH=$PWD/.peer/flashmla${PYTHONPATH:+:$PYTHONPATH}
for shape in $SHAPES; do
  for who in $WHO; do
    if [ $who = flashmla ]; then re='flash_fwd_splitkv_mla'; else re='decode_split_'; fi
    tag=ncu_${shape}_$who; [ $who = ours ] && tag=${tag}_v$VARIANT
    timeout 240 "$NCU" --kernel-name "regex:$re" --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
      ${SASS:+--section SourceCounters} \
      --export "$OUT/$tag" \
      python3 tools/mla-bench/peer_flashmla.py --lib "$LIB" --only "$shape" --runs 1 --warmup 1 --no-ceilings --variant "$VARIANT" \
      > "$OUT/${tag}_run.log" 2>&1
    echo "ncu $shape $who rc=$?"
    "$NCU" --import "$OUT/$tag.ncu-rep" --page details > "$OUT/${tag}.txt" 2>&1
    # with SASS=1: per-instruction stall samples (where the warps wait)
    [ -n "${SASS:-}" ] && "$NCU" --import "$OUT/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/${tag}_sass.csv" 2>&1
    # the warp stall breakdown (cycles per issued instruction by reason), largest first
    "$NCU" --import "$OUT/$tag.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) >= 3:
    def num(v):
        try: return float(v.replace(",", ""))
        except ValueError: return None
    st = [(num(v), k) for k, v in zip(rows[0], rows[2]) if "issue_stalled" in k and "per_issue_active" in k and num(v) is not None]
    for v, k in sorted(st, reverse=True)[:8]: print(f"stall {k}: {v}")' > "$OUT/${tag}_stalls.txt" 2>&1
    cat "$OUT/${tag}_stalls.txt"
    rm -f "$OUT/$tag.ncu-rep"
    grep -E "Duration|SM Frequency|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Shared|Tensor|Issue Slots|Registers Per|Grid Size|Block Size|Cluster|Warp Cycles Per Issued|No Eligible|L2 Hit|Mem Busy|Max Bandwidth|Pipe" "$OUT/${tag}.txt" | head -40
  done
done
