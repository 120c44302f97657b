#!/usr/bin/env bash
# Session 17, call 4 (nvidia-h200; carry .peer .carry): the FP8 wide kernel, second version
# (kernels/fp8_decode_wide.cu: warpgroup 0 S + softmax with the next tile's S issued under the
# softmax; warpgroups 1-2 each write their own half of V^T and issue the tile's P.V once; one
# producer thread), against the 64-row kernel (base = this tree with .carry/s17w2.patch reversed; that patch is docs/bench-data/s17/wide-v2.patch).
# FP8 GPU tests of the new tree (hang guard: timeout), then peer_fp8.py on the many-head d_c = 512
# shapes beside FlashMLA BF16 dense, new and base in alternated processes.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer.log" 2>&1; echo "peer rc=$?" >> "$OUT/peer.log") &
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/base-src -xf -
(cd /tmp/base-src && patch -s -R -p1 < "$OLDPWD/.carry/s17w2.patch") || { echo "patch -R failed"; exit 1; }
CF="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON"
cmake -S . -B /tmp/b $CF > "$OUT/cfg.log" 2>&1 || { tail "$OUT/cfg.log"; exit 1; }
cmake -S /tmp/base-src -B /tmp/bb $CF > "$OUT/cfgb.log" 2>&1 || { tail "$OUT/cfgb.log"; exit 1; }
cmake --build /tmp/bb -j5 --target mla_fp8_capi > "$OUT/buildb.log" 2>&1 &
bpid=$!
cmake --build /tmp/b -j10 --target mla_fp8_capi test_kernels_fp8_gpu > "$OUT/build.log" 2>&1 ||
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
SH=B128_H128_sq1_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq2_L8k_dc512,B128_H128_sq1_L32k_dc512,B128_H64_sq2_L8k_dc512
n=0
for lib in /tmp/b /tmp/bb /tmp/b /tmp/bb; do
  n=$((n + 1))
  echo "=== FP8 $([ $lib = /tmp/b ] && echo wide-v2 || echo base-rows64) ($(( $(date +%s) - T0 )) s)"
  timeout 120 $PF --lib $lib/tools/mla-bench/libmla_fp8_capi.so --only "$SH" --runs 10 --json "$OUT/fp8_$n.json" 2>&1 |
    grep -v "^device" | cut -c1-220
done
echo "call total $(( $(date +%s) - T0 )) s"
