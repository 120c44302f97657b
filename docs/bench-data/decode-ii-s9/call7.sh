#!/usr/bin/env bash
# session 9 call 7: the peer scripts after the --l2-resident note (one shape each, JSON flag).
set -uo pipefail
T0=$(date +%s)
[ -d .peer/flashmla/build ] || (bash tools/mla-bench/peer_unpack.sh > $OUT/peer.log 2>&1) &
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/cfg.log 2>&1 || exit 1
cmake --build /tmp/b -j16 --target mla_fp8_capi mla_kv4_capi mla_decode_capi > $OUT/build.log 2>&1 || { grep error $OUT/build.log | head; exit 1; }
wait
export PYTHONPATH=$PWD/.peer/flashmla:$PWD/.peer/flashmla/tests PYTHONUNBUFFERED=1
L=/tmp/b/tools/mla-bench
timeout 40 python3 tools/mla-bench/peer_fp8.py --lib $L/libmla_fp8_capi.so --only B128_H16_sq1_L8k_dc512 --runs 5 --l2-resident --json $OUT/f.json 2>&1 | tail -4
timeout 40 python3 tools/mla-bench/peer_kv4.py --lib $L/libmla_kv4_capi.so --suite quick --runs 5 --l2-resident --json $OUT/k.json 2>&1 | tail -5 | cut -c1-120
timeout 40 python3 tools/mla-bench/peer_flashmla.py --lib $L/libmla_decode_capi.so --only h16_sq1_l8k --runs 5 --no-ceilings --l2-resident --json $OUT/b.json 2>&1 | tail -3
python3 -c "import json,sys; print([json.load(open(f))['l2_resident'] for f in sys.argv[1:]])" $OUT/f.json $OUT/k.json $OUT/b.json
echo "total $(( $(date +%s) - T0 )) s"
