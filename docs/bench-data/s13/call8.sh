#!/usr/bin/env bash
# Session 13, call 8 (nvidia-h200, carry .peer): the final tree (running-max slack on the wgmma paths):
# every GPU test (ctest -L gpu), then the issue-10 suite beside FlashMLA in one process for the record.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/cfg.log" 2>&1 &&
  cmake --build /tmp/b -j16 > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
(cd /tmp/b && timeout 400 ctest -L gpu --output-on-failure -j2 > "$OUT/ctest_gpu.log" 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*Failed|Failure|rel_l2" "$OUT/ctest_gpu.log" | grep -v "Passed" | head -30
wait
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 250 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so --suite issue10 \
  --json "$OUT/issue10.json" > "$OUT/issue10.log" 2>&1; echo "issue10 rc=$?"
cut -c1-130 "$OUT/issue10.log"
cd "$OUT" && tar czf call8.tgz ctest_gpu.log issue10.json issue10.log && ls
echo "total $(( $(date +%s) - T0 )) s"
