#!/usr/bin/env bash
# Session 13, call 5 (nvidia-h200, carry .carry .peer): the row max as a tree and O rescaled per row
# half (.carry/tree-max.patch, the tree's uncommitted change; v6 and v7) against the tree before it:
# decode GPU tests, ours / base / FlashMLA in one process (manyhead, dc512), then the whole issue-10
# suite (ours, base and FlashMLA in one process) for the record.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
OUT=$OUT PATCH=.carry/tree-max.patch TESTS=test_kernels_decode_gpu SUITES="manyhead dc512" bash tools/mla-bench/run_ab_patch_device.sh 2>&1 | grep -v "^device"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
echo "=== issue10 suite"
timeout 280 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
  --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so --suite issue10 --json "$OUT/ab_issue10.json" > "$OUT/ab_issue10.log" 2>&1
echo "issue10 rc=$?"; cut -c1-200 "$OUT/ab_issue10.log"
cd "$OUT" && tar czf call5.tgz *.json *.log && rm -f cfg*.log build*.log && ls
