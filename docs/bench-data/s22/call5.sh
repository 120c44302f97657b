#!/usr/bin/env bash
# Session 22, call 5: the final tree (fp4_to_fp8.cuh as in call 3, the rows64 masked softmax of
# call 4): FP8 and 4-bit GPU tests, the 4-bit record (peer_kv4.py, issue 12's suite) and a check
# of peer_kv4.py --routes fp8.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j14 --target test_kernels_fp8_gpu test_kernels_kv4_gpu mla_kv4_capi >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
for t in test_kernels_fp8_gpu test_kernels_kv4_gpu; do
  timeout 200 /tmp/b/tests/kernels/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/$t.log" | head -8
done
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 400 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b/tools/mla-bench/libmla_kv4_capi.so --json "$OUT/peer_kv4.json" 2>&1 |
  tee "$OUT/peer_kv4.log" | grep -E "^device|^fp4|^codebook"
echo "=== --routes fp8, suite fp4"
timeout 200 python3 tools/mla-bench/peer_kv4.py --lib /tmp/b/tools/mla-bench/libmla_kv4_capi.so --suite fp4 --routes fp8 --runs 5 \
  --json "$OUT/peer_kv4_fp8only.json" 2>&1 | grep -E "^device|^fp4|Error|error"
echo "total $(( $(date +%s) - T0 )) s"
