#!/usr/bin/env bash
# TPLA accuracy sweep on the shipped trained tiny models: for each model, capture (C++ forward),
# calibrate, convert at tp in {2, 4} (g = tp) under identity / hadamard / pca and both norm modes,
# then verify-decode (prefill 192 exact, decode 64 through TPLA, 8 held-out sequences, perplexity).
# Prints one row per configuration; JSON per run in $OUT. Usage:
#   BUILD_DIR=build DEVICE=cpu OUT=/tmp/tpla-sweep bash scripts/tpla_sweep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}/tools
OUT=${OUT:-/tmp/tpla-sweep}
DEVICE=${DEVICE:-cpu}
mkdir -p "$OUT"
[ -f datasets/corpus/calib.bin ] || python3 datasets/corpus/build_corpus.py
printf "%-8s %-3s %-9s %-6s %9s %9s %9s %11s %11s\n" model tp reparam norm mean_rel worst_rel kern_rel bpb_orig bpb_conv
for m in ${MODELS:-tiny-v2 tiny-v3}; do
  "$B/mla-forward/mla-forward" -q capture "datasets/$m" --out "$OUT/$m-cap.h5" --calib datasets/corpus/calib.bin \
    --calib-seqs 64 --eval datasets/corpus/heldout.bin --eval-seqs 8 --seq-len 256 --ref-seqs 1 --ref-len 16
  "$B/mla-calibrate/mla-calibrate" -q --model "datasets/$m" --activations "$OUT/$m-cap.h5" --tp 2,4 -o "$OUT/$m-calib.h5"
  for tp in ${TPS:-2 4}; do
    for rp in identity hadamard pca; do
      for norm in approx exact; do
        d="$OUT/$m-tp$tp-$rp-$norm"
        rm -rf "$d"
        calib=(); [ "$rp" = identity ] || calib=(--calib "$OUT/$m-calib.h5")
        "$B/mla-convert/mla-convert" -q --tp $tp --reparam $rp --norm $norm "${calib[@]}" -o "$d" "datasets/$m"
        "$B/verify-decode/verify-decode" -q --original "datasets/$m" --converted "$d" --activations "$OUT/$m-cap.h5" \
          --prefill 192 --decode 64 --sequences 8 --device "$DEVICE" --max-rel-l2 1 --max-cos-diff 1 --perplexity \
          --json "$d.json" > /dev/null || true
        python3 - "$d.json" "$m" $tp $rp $norm <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); L = j["layers"]
rel = [l["converted_vs_original"]["rel_l2"] for l in L]
kr = max(l["kernel_vs_f64_path"]["rel_l2"] for l in L)
p = j["perplexity"]
print("%-8s %-3s %-9s %-6s %9.4f %9.4f %9.2e %11.4f %11.4f" % (sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5],
      sum(rel) / len(rel), max(rel), kr, p["original_bits_per_byte"], p["converted_bits_per_byte"]))
PY
        rm -rf "$d"
      done
    done
  done
done
