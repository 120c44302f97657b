#!/usr/bin/env bash
# Session 13, call 1 (nvidia-h200, carry .carry .peer): v6's warpgroup 0 issues its P.V from
# registers before handing P to warpgroup 1 (.carry/v6-rs-pv.patch = `git diff` of kernels/ on the
# tree before commit). The decode GPU tests, then ours / base / FlashMLA interleaved in one process
# (peer_flashmla.py --base-lib: the base's outputs checked bit-identical) over the d_c = 512
# many-head suite, in two processes. Prediction: docs/gpu-notes.md, session 13.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
OUT=$OUT PATCH=.carry/v6-rs-pv.patch TESTS=test_kernels_decode_gpu SUITES=dc512 bash tools/mla-bench/run_ab_patch_device.sh
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
echo "=== second process"
timeout 300 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
  --base-lib /tmp/bb/tools/mla-bench/libmla_decode_capi.so --suite dc512 --json "$OUT/ab_dc512_2.json" 2>&1 | tee "$OUT/ab_dc512_2.log"
cd "$OUT" && tar czf ../s13-call1.tgz . && mv ../s13-call1.tgz .
