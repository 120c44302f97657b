#!/usr/bin/env bash
# Per-cycle comparison beside FlashMLA under Nsight Compute's locked clocks: for each shape, one
# launch of FlashMLA's dense decode kernel and one of our split kernel (the same peer_flashmla.py
# shape: lengths, page tables), each profiled alone with the caches flushed, counting SM cycles,
# time, tensor-pipe activity, instructions and DRAM / L2 reads. The peer timing (peer_flashmla.py)
# runs both kernels at whatever clock the H200's power state allows, which moves short shapes by
# several % in either direction (docs/gpu-notes.md, sessions 14-16); cycles at a locked clock say
# how much work each kernel does per cycle, which is what a kernel change can move.
# Only the split kernels are counted: our combine (when a shape launches it) and FlashMLA's are
# left out, so this is the per-tile engine, not the whole call.
# Usage (GPU machine, repo root, after a build in /tmp/b and tools/mla-bench/peer_unpack.sh):
#   OUT=dir [LIB=/tmp/b/tools/mla-bench/libmla_decode_capi.so] [SHAPES="h128_sq1_l8k ..."] \
#     [DEADLINE=seconds] bash tools/mla-bench/ncu_cycles.sh
# Writes $OUT/ncu_cycles.json and prints a markdown table (FlashMLA cycles / ours = the per-cycle
# ratio, > 1 where ours needs fewer cycles).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
LIB=${LIB:-/tmp/b/tools/mla-bench/libmla_decode_capi.so}
SHAPES=${SHAPES:-"h128_sq1_l4k h128_sq1_l8k h128_sq1_l32k h128_sq2_l4k h128_sq2_l8k h128_sq2_l32k
  h64_sq2_l4k h64_sq2_l8k h64_sq2_l32k tpla_tp2_h128_dc256_l8k tpla_tp2_h128_dc256_l32k
  tpla_tp4_h64_dc256_l32k tpla_tp4_h128_dc128_l32k h64_sq1_l8k h16_sq1_l8k h16_sq2_l8k"}
DEADLINE=${DEADLINE:-100000}  # stop starting new runs after this many seconds
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH}
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
M=$M,sm__inst_executed.sum,dram__bytes_read.sum,lts__t_sectors_op_read.sum
mkdir -p "$OUT/ncu_cycles"
trap 'rm -rf "$OUT/ncu_cycles"' EXIT  # the per-run CSVs, also when the script is stopped
T0=$(date +%s)
for shape in $SHAPES; do
  for who in flashmla ours; do
    if [ $(( $(date +%s) - T0 )) -gt "$DEADLINE" ]; then echo "skipped $shape $who (deadline)"; continue; fi
    re='decode_split_'; extra=--no-peer
    [ $who = flashmla ] && { re='flash_fwd_splitkv_mla'; extra=; }
    timeout 120 "$NCU" --kernel-name "regex:$re" --launch-skip 1 --launch-count 1 --metrics "$M" --csv \
      python3 tools/mla-bench/peer_flashmla.py --lib "$LIB" --only "$shape" --runs 1 --warmup 1 --no-ceilings $extra \
      > "$OUT/ncu_cycles/${shape}_$who.csv" 2>&1 || echo "ncu $shape $who failed (rc=$?)"
  done
done
python3 - "$OUT" $SHAPES <<'PY'
import csv, json, os, sys
out, shapes = sys.argv[1], sys.argv[2:]
def metrics(path):
    """metric name -> value of the one profiled launch in an ncu --csv file (None if absent)."""
    if not os.path.exists(path):
        return None
    rows = [r for r in csv.reader(l for l in open(path) if l.startswith('"'))]
    if len(rows) < 2:
        return None
    h = rows[0]
    iname, ival = h.index("Metric Name"), h.index("Metric Value")
    m = {}
    for r in rows[1:]:
        try:
            m[r[iname]] = float(r[ival].replace(",", ""))
        except (ValueError, IndexError):
            pass
    return m or None
res = {}
print("| shape | FlashMLA Mcycles | ours Mcycles | FlashMLA / ours (per cycle) | tensor active FM / ours | "
      "instructions ours / FM | DRAM GB FM / ours |")
print("|---|---|---|---|---|---|---|")
for s in shapes:
    fm, us = metrics(f"{out}/ncu_cycles/{s}_flashmla.csv"), metrics(f"{out}/ncu_cycles/{s}_ours.csv")
    res[s] = {"flashmla": fm, "ours": us}
    if not fm or not us:
        print(f"| {s} | {'-' if not fm else ''} | {'-' if not us else ''} | (missing) | | | |")
        continue
    c = "sm__cycles_elapsed.max"
    t = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
    print(f"| {s} | {fm[c] / 1e6:.3f} | {us[c] / 1e6:.3f} | **{fm[c] / us[c]:.3f}** | {fm[t]:.1f}% / {us[t]:.1f}% | "
          f"{us['sm__inst_executed.sum'] / fm['sm__inst_executed.sum']:.2f} | "
          f"{fm['dram__bytes_read.sum'] / 1e9:.3f} / {us['dram__bytes_read.sum'] / 1e9:.3f} |")
json.dump(res, open(f"{out}/ncu_cycles.json", "w"), indent=1)
PY
echo "ncu_cycles: $(( $(date +%s) - T0 )) s"
