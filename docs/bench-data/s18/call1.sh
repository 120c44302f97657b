#!/usr/bin/env bash
# Session 18, call 1 (nvidia-h200; carry .peer .carry): session 17's two prepared v6 changes, and
# both together, each against v6 beside FlashMLA (dc512 suite, one process per variant: ours, the
# base and FlashMLA interleaved; the base's outputs checked bit-identical), then the clock
# timelines of v6 and of each variant at 128 rows 8K, and the first timeline of the FP8 64-row
# kernel (compiled in since session 17, never run).
#   A = next-v6-pv0-ss.patch (warpgroup 0's P.V from shared memory after the hand-over)
#   B = next-v6-block-barriers.patch (a TMA barrier per 64-column block; S starts per block)
#   C = A + B
# Usage: cp docs/bench-data/s17/next-v6-{pv0-ss,block-barriers}.patch .carry/; OUT=$OUT bash docs/bench-data/s18/call1.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "($(( $(date +%s) - T0 )) s)"; }
(bash tools/mla-bench/peer_unpack.sh > /tmp/peer.log 2>&1; echo "peer rc=$?" >> /tmp/peer.log) &
PA=.carry/next-v6-pv0-ss.patch PB=.carry/next-v6-block-barriers.patch
mk() {  # name, cmake extra flags, patches...
  local n=$1 flags=$2; shift 2
  rm -rf /tmp/s$n && mkdir -p /tmp/s$n
  tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/s$n -xf -
  for p in "$@"; do (cd /tmp/s$n && patch -s -p1 < "$OLDPWD/$p") || { echo "patch $p failed for $n"; return 1; }; done
  cmake -S /tmp/s$n -B /tmp/b$n -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON $flags > /tmp/cfg$n.log 2>&1 ||
    { tail /tmp/cfg$n.log; return 1; }
}
mk 0 "" && mk A "" $PA && mk B "" $PB && mk C "" $PA $PB &&
  mk T0 -DMLA_TIMELINE=ON && mk TA -DMLA_TIMELINE=ON $PA && mk TB -DMLA_TIMELINE=ON $PB && mk TC -DMLA_TIMELINE=ON $PA $PB ||
  exit 1
pids=()
for n in 0 A B C TA TB TC; do cmake --build /tmp/b$n -j3 --target mla_decode_capi > /tmp/build$n.log 2>&1 & pids+=($!); done
cmake --build /tmp/bT0 -j3 --target mla_decode_capi mla_fp8_capi > /tmp/buildT0.log 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait $p || { echo "a build failed"; grep -l -E "error" /tmp/build*.log; grep -h -E "error" /tmp/build*.log | head; exit 1; }; done
echo "builds done $(el)"
wait; tail -1 /tmp/peer.log
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests:$PWD/tools/mla-bench${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
L=tools/mla-bench/libmla_decode_capi.so
for n in B A C; do
  echo "=== variant $n against v6"
  timeout 150 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b$n/$L --base-lib /tmp/b0/$L --suite dc512 \
    --json "$OUT/ab_$n.json" 2>&1 | cut -c1-250
  echo "rc=$? $(el)"
done
for n in T0 TA TB TC; do
  echo "=== timeline $n"
  timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/b$n/$L --heads 128 --s-q 1 --seqlen 8192 \
    --json "$OUT/tl_$n.json" 2>&1 | tail -25
  echo "rc=$? $(el)"
done
echo "=== timeline fp8-rows64"
timeout 60 python3 tools/mla-bench/timeline.py --kernel fp8-rows64 --lib /tmp/bT0/tools/mla-bench/libmla_fp8_capi.so \
  --heads 128 --s-q 1 --seqlen 8192 --json "$OUT/tl_fp8.json" 2>&1 | tail -30
echo "rc=$? total $(el)"
