#!/usr/bin/env bash
# One device call for an A/B of decode variants beside FlashMLA: unpack/build FlashMLA
# (peer_unpack.sh, prebuilt bundle when .peer holds one), build and run the decode GPU tests
# (run_peer.sh, which then times $SUITE for each variant), profile $NCU_SHAPES with each variant
# (ncu_decode.sh), and pack every output file into $OUT/all.tar.xz (the device tool returns few
# files).
# Usage (GPU machine, repo root, .peer carried): OUT=dir SUITE=manyhead VARIANTS="0 8" \
#   NCU_SHAPES=h128_sq1_l8k bash tools/mla-bench/run_variant_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
W=/tmp/variant-out
rm -rf "$W" && mkdir -p "$W"
bash tools/mla-bench/peer_unpack.sh > "$W/peer_build.log" 2>&1 || { echo "FlashMLA unavailable"; tail -5 "$W/peer_build.log"; }
OUT=$W bash tools/mla-bench/run_peer.sh "${SUITE:-manyhead}" ${VARIANTS:-0 8}
for v in ${NCU_VARIANTS:-${VARIANTS:-0 8}}; do
  [ -n "${NCU_SHAPES:-}" ] && OUT=$W SHAPES="$NCU_SHAPES" VARIANT=$v WHO=ours bash tools/mla-bench/ncu_decode.sh
done
tar -C "$W" -cJf "$OUT/all.tar.xz" --exclude='*.ncu-rep' . && ls -la "$OUT/all.tar.xz"
