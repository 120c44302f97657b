#!/usr/bin/env bash
# session 9 call 3: the kernels' floors without HBM (--l2-resident: every request reads request 0's
# pages) beside the same shapes from HBM, ours and FlashMLA on the same tables.
set -uo pipefail
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d .peer/flashmla/build ] || (bash tools/mla-bench/peer_unpack.sh > $OUT/peer.log 2>&1) &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfg.log 2>&1 || exit 1
cmake --build /tmp/b -j16 --target mla_fp8_capi mla_kv4_capi mla_decode_capi > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head; exit 1; }
wait
echo "build $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
S=B128_H16_sq1_L8k_dc512,B128_H16_sq2_L8k_dc512,B128_H64_sq1_L8k_dc512,B128_H128_sq1_L8k_dc512
L=/tmp/b/tools/mla-bench
for mode in "" "--l2-resident"; do
  echo "######## mode: ${mode:-hbm}"
  timeout 120 python3 tools/mla-bench/peer_fp8.py --lib $L/libmla_fp8_capi.so --only $S --runs 10 $mode 2>&1 | grep -E "^B128|^device"
  timeout 150 python3 tools/mla-bench/peer_kv4.py --lib $L/libmla_kv4_capi.so --suite fp4 --runs 10 $mode 2>&1 | grep -vE "^\s*$" | tail -12
  timeout 60 python3 tools/mla-bench/peer_flashmla.py --lib $L/libmla_decode_capi.so --only h16_sq1_l8k --runs 10 --no-ceilings $mode 2>&1 | tail -4
  timeout 60 python3 tools/mla-bench/peer_flashmla.py --lib $L/libmla_decode_capi.so --only h128_sq1_l8k --runs 10 --no-ceilings $mode 2>&1 | tail -2
done 2>&1 | tee $OUT/l2.txt
echo "total $(( $(date +%s) - T0 )) s"
