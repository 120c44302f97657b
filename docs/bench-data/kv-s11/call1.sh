#!/usr/bin/env bash
# Session 11, call 1 (nvidia-h200, carry .peer): mla-bench --kv (new) on the issue 11 / 12 shapes,
# then run_kv4_device.sh with KV4_VERIFY=1 (both --kv4-route values through verify-decode, per
# layer on cuda and cpu and end to end) and FlashMLA beside the 4-bit routes (quick suite) as the
# cross-check of mla-bench's figures in the same call.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla-bench test_verify_kv4_fp8_route_gpu >> "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "mla-bench built $(( $(date +%s) - T0 )) s"
B=/tmp/b/tools/mla-bench/mla-bench
run() {  # name, args
  local n=$1; shift
  timeout 120 $B --runs 30 "$@" --json "$OUT/kvb_$n.json" > "$OUT/kvb_$n.txt" 2>&1
  echo "== $n rc=$? ($(( $(date +%s) - T0 )) s): $*"; grep -E "^ceilings|^  " "$OUT/kvb_$n.txt"
}
run fp8_h16_8k   --kv fp8 --heads 16 --seqlen 8192
run fp8_h16_32k  --kv fp8 --heads 16 --seqlen 32768
run fp8_h128_8k  --kv fp8 --heads 128 --seqlen 8192
run fp4_h16_8k   --kv fp4 --heads 16 --seqlen 8192
run fp4_h16_32k  --kv fp4 --heads 16 --seqlen 32768
run fp4_h128_8k  --kv fp4 --heads 128 --seqlen 8192
run cb_h16_8k    --kv codebook --heads 16 --seqlen 8192
run fp4_h16_8k_varied --kv fp4 --heads 16 --seqlen 8192 --varied
run fp8_bad_dc   --kv fp8 --heads 16 --seqlen 1024 --dc 64
timeout 60 /tmp/b/tests/verify/test_verify_kv4_fp8_route_gpu > "$OUT/test_verify_kv4_fp8_route_gpu.log" 2>&1
echo "test_verify_kv4_fp8_route_gpu rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$OUT/test_verify_kv4_fp8_route_gpu.log"
tar -C "$OUT" -czf "$OUT/kvb.tar.gz" $(cd "$OUT" && ls kvb_*) && rm -f "$OUT"/kvb_*
echo "== run_kv4_device.sh ($(( $(date +%s) - T0 )) s)"
KV4_VERIFY=1 KV4_PEER_ARGS="--suite quick" OUT="$OUT" bash tools/mla-bench/run_kv4_device.sh 2>&1 | grep -v "^\[" | tail -60
echo "total $(( $(date +%s) - T0 )) s"
