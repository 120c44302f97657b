#!/usr/bin/env bash
# Session 17, call 1 (nvidia-h200; carry .peer .carry): the FP8 wide kernel (kernels/fp8_decode_wide.cu:
# v6's division of work, V^T written to shared memory by the producer warpgroup) against the 64-row
# kernel (base = this tree with .carry/s17a.patch reversed; the tree: commit 6c4e4c0 without its probe). FP8 GPU tests of the new tree (hang guard:
# timeout), then peer_fp8.py on the many-head d_c = 512 shapes beside FlashMLA BF16 dense, new and
# base in alternated processes; then dsmem-bench (the cluster design's exchange cost, never run yet).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/base-src -xf -
(cd /tmp/base-src && patch -s -R -p1 < "$OLDPWD/.carry/s17a.patch") || { echo "patch -R failed"; exit 1; }
CF="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON"
cmake -S . -B /tmp/b $CF > "$OUT/cfg.log" 2>&1 || { tail "$OUT/cfg.log"; exit 1; }
cmake -S /tmp/base-src -B /tmp/bb $CF > "$OUT/cfgb.log" 2>&1 || { tail "$OUT/cfgb.log"; exit 1; }
cmake --build /tmp/bb -j5 --target mla_fp8_capi > "$OUT/buildb.log" 2>&1 &
bpid=$!
cmake --build /tmp/b -j10 --target mla_fp8_capi test_kernels_fp8_gpu dsmem-bench > "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; tail -20 "$OUT/build.log"; exit 1; }
wait $bpid || { tail -20 "$OUT/buildb.log"; exit 1; }
echo "builds done $(( $(date +%s) - T0 )) s"
timeout 150 /tmp/b/tests/kernels/test_kernels_fp8_gpu > "$OUT/fp8_gpu_test.log" 2>&1
rc=$?
echo "test_kernels_fp8_gpu rc=$rc ($(( $(date +%s) - T0 )) s)"
grep -E "^\[  (PASSED|FAILED)|Failure|^\[       OK|FAILED  \]" "$OUT/fp8_gpu_test.log" | head -30
[ $rc -eq 124 ] && { echo "tests timed out: a hang, no timing"; tail -5 "$OUT/fp8_gpu_test.log"; exit 1; }
wait
tail -1 "$OUT/peer.log"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PF="python3 tools/mla-bench/peer_fp8.py"
SH=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512,B128_H128_sq1_L32k_dc512
n=0
for lib in /tmp/b /tmp/bb /tmp/b; do
  n=$((n + 1))
  echo "=== FP8 $([ $lib = /tmp/b ] && echo wide || echo base-rows64) ($(( $(date +%s) - T0 )) s)"
  timeout 120 $PF --lib $lib/tools/mla-bench/libmla_fp8_capi.so --only "$SH" --runs 10 --json "$OUT/fp8_$n.json" 2>&1 |
    grep -v "^device" | cut -c1-220
done
echo "=== dsmem-bench ($(( $(date +%s) - T0 )) s)"
timeout 20 /tmp/b/tools/mla-bench/dsmem-bench 4096 0 2>&1 | tail -4
timeout 20 /tmp/b/tools/mla-bench/dsmem-bench 4096 1000 2>&1 | tail -4
echo "call total $(( $(date +%s) - T0 )) s"
