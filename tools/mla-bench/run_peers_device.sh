#!/usr/bin/env bash
# One device call for the record: every peer suite of the decode issues beside FlashMLA in one
# call (BF16 issue 10, FP8 issue 11, 4-bit issue 12), each in its own process with the device's
# copy bandwidth and GEMM rate measured in that process; JSON of each into $OUT.
# MODES="hbm l2" runs each suite a second time with --l2-resident (every request reads request
# 0's pages, so the cache read stays in L2): a shape whose time barely moves is bound by the
# kernel's own per-tile chain, not by HBM (peer_<suite>_l2.json). BF16_SUITE picks the BF16 shapes.
# Usage (GPU machine, repo root, .peer carried):
#   OUT=dir [SUITES="bf16 fp8 kv4"] [MODES="hbm l2"] [BF16_SUITE=manyhead] bash tools/mla-bench/run_peers_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
(bash tools/mla-bench/peer_unpack.sh > /tmp/peer_build.log 2>&1; echo "peer rc=$?" >> /tmp/peer_build.log) &
peer=$!
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > /tmp/peers_build.log 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi mla_fp8_capi mla_kv4_capi >> /tmp/peers_build.log 2>&1 ||
  { tail -30 /tmp/peers_build.log; exit 1; }
wait $peer; tail -1 /tmp/peer_build.log
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
L=/tmp/b/tools/mla-bench
for s in ${SUITES:-bf16 fp8 kv4}; do
  case $s in
    bf16) cmd="tools/mla-bench/peer_flashmla.py --lib $L/libmla_decode_capi.so --suite ${BF16_SUITE:-issue10}" ;;
    fp8) cmd="tools/mla-bench/peer_fp8.py --lib $L/libmla_fp8_capi.so --suite issue11" ;;
    kv4) cmd="tools/mla-bench/peer_kv4.py --lib $L/libmla_kv4_capi.so --suite issue12" ;;
  esac
  for m in ${MODES:-hbm}; do
    case $m in
      hbm) flag="" suffix="" ;;
      l2) flag="--l2-resident" suffix="_l2" ;;
      *) echo "MODES: hbm or l2, not '$m'" >&2; exit 2 ;;
    esac
    echo "=== $s ($m)"
    timeout 200 python3 $cmd $flag --json "$OUT/peer_$s$suffix.json" 2>&1 | cut -c1-124
  done
done
