#!/usr/bin/env bash
# TPLA fidelity study (docs/calibration.md, "TPLA settings compared"): identity / Hadamard / PCA /
# qk latent bases at tp = 2, 4, 8 on a tiny model, with and without PD separation, approx and
# exact kv norm, mu per layer and per head. Each setting: mla-convert, then verify-decode
# (per-layer attention-output error on 2 held-out sequences, and the end-to-end loss change
# with its paired 95% interval on held-out windows). JSON per setting in $OUT/, summary table
# in $OUT/summary.md (tools/mla-calibrate/tpla_study_table.py).
# Usage: bash scripts/tpla_study.sh [CHECKPOINT] [WINDOWS] [VARIATION_WINDOWS]
set -euo pipefail
cd "$(dirname "$0")/.."
CKPT=${1:-datasets/tiny-v3}
WIN=${2:-64}
VWIN=${3:-32}
B=${BUILD_DIR:-build}/tools
name=$(basename "$CKPT")
OUT=${MLA_OUT:-out}/tpla-study-$name
mkdir -p "$OUT"
[ -f datasets/corpus/calib.bin ] || python3 datasets/corpus/build_corpus.py
CAP=$OUT/capture.h5
[ -f "$CAP" ] || "$B/mla-forward/mla-forward" -q capture "$CKPT" --out "$CAP" --calib datasets/corpus/calib.bin \
  --calib-seqs 64 --eval datasets/corpus/heldout.bin --eval-seqs 2 --seq-len 256
"$B/mla-calibrate/mla-calibrate" -q --model "$CKPT" --activations "$CAP" --tp 2,4,8 -o "$OUT/calib.h5" \
  --json "$OUT/calib.json" --report "$OUT/calib.md"
"$B/mla-calibrate/mla-calibrate" -q --model "$CKPT" --activations "$CAP" --tp 2,4,8 --mu-per-head \
  -o "$OUT/calib-head.h5" --json "$OUT/calib-head.json"

run() {  # tp basis norm mu(layer|head) pd(pd|nopd) windows
  local tp=$1 basis=$2 norm=$3 mu=$4 pd=$5 win=$6
  local tag=tp$tp-$basis-$norm-mu$mu-$pd calib=$OUT/calib.h5
  [ "$mu" = head ] && calib=$OUT/calib-head.h5
  [ -f "$OUT/$tag.json" ] && return 0
  rm -rf "$OUT/conv-$tag"
  if ! "$B/mla-convert/mla-convert" -q --tp "$tp" --reparam "$basis" --norm "$norm" --calib "$calib" \
    -o "$OUT/conv-$tag" "$CKPT" 2> "$OUT/$tag.err"; then
    echo "$tag: not converted: $(tail -1 "$OUT/$tag.err")"  # e.g. a vocabulary tp does not divide
    return 0
  fi
  local flags=()
  [ "$pd" = nopd ] && flags+=(--no-pd-separation)
  # tp 8 slices the tiny models' d_c = 128 into 16-wide groups, narrower than any decode kernel
  # (32..512): the per-layer figures then come from the float64 path alone, as the table's do.
  [ "$tp" = 8 ] && flags+=(--no-kernel)
  local t0=$SECONDS
  "$B/verify-decode/verify-decode" -q --original "$CKPT" --converted "$OUT/conv-$tag" --activations "$CAP" \
    --prefill 32 --decode 224 --sequences 2 --max-rel-l2 1 --max-cos-diff 1 --perplexity \
    --perplexity-windows "$win" --perplexity-text datasets/corpus/heldout.bin "${flags[@]}" \
    --json "$OUT/$tag.json.tmp" > "$OUT/$tag.txt" || true
  mv "$OUT/$tag.json.tmp" "$OUT/$tag.json"
  rm -rf "$OUT/conv-$tag"
  echo "$tag: $((SECONDS - t0)) s; $(grep -E 'difference' "$OUT/$tag.txt" | head -1)"
}

# Main grid: every basis at tp 2, 4, 8 (PD separation, approx norm, mu per layer).
for tp in 2 4 8; do for basis in identity hadamard pca qk; do run $tp $basis approx layer pd "$WIN"; done; done
# Variations on the two calibrated bases (tp = 2; VARIATION_TP to change).
for tp in ${VARIATION_TP:-2}; do for basis in pca qk; do
  run $tp $basis exact layer pd "$VWIN"
  run $tp $basis approx head pd "$VWIN"
  run $tp $basis approx layer nopd "$VWIN"
done; done
python3 tools/mla-calibrate/tpla_study_table.py "$OUT" > "$OUT/summary.md"
echo "wrote $OUT/summary.md"
