#!/usr/bin/env bash
# One device call: build FlashMLA (peer_unpack.sh) and our C entry point side by side, time the
# many-head suite beside FlashMLA, then Nsight Compute both kernels on the shapes in $SHAPES
# (ncu_decode.sh). Also packs the FlashMLA build as $OUT/flashmla-built.tar.xz, which later calls
# can carry in .peer/ instead of building again.
# Usage (GPU machine, repo root, .peer carried): OUT=dir bash tools/mla-bench/run_ncu_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/smi.txt" 2>&1
(bash tools/mla-bench/peer_unpack.sh > "$OUT/peer_build.log" 2>&1; echo "peer build rc=$? $(date +%T)") &
peer=$!
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j12 --target mla_decode_capi >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; }
echo "our build done $(date +%T)"
wait $peer
if [ ! -f .peer/flashmla-built.tar.xz ] && [ -d .peer/flashmla/flash_mla ]; then
  tar -C .peer -cJf "$OUT/flashmla-built.tar.xz" --exclude=flashmla/build --exclude=flashmla/csrc \
    --exclude=flashmla/.git flashmla && ls -la "$OUT/flashmla-built.tar.xz"
fi
export PYTHONPATH=$PWD/.peer/flashmla${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 300 python3 tools/mla-bench/peer_flashmla.py --lib /tmp/b/tools/mla-bench/libmla_decode_capi.so \
  --suite "${SUITE:-manyhead}" --json "$OUT/peer.json" 2>&1 | tee "$OUT/peer.log" | cut -c1-130
OUT=$OUT SHAPES="${SHAPES:-h128_sq1_l8k tpla_tp2_h128_dc256_l32k}" bash tools/mla-bench/ncu_decode.sh
echo "done $(date +%T)"
