#!/usr/bin/env bash
# Byte identity of the tools' outputs between two builds, e.g. the commit before a refactor
# (built into a separate directory from a `git worktree`) and the working tree after it:
#   - captures by `mla-forward capture` of both shipped tiny models,
#   - calib.h5 by `mla-calibrate` on those captures,
#   - `mla-convert` of datasets/tiny-v2 and tiny-v3 at tp 1 and 2 with --reparam pca and
#     hadamard, and of a synthetic V3 FP8 checkpoint (`mla-synth --preset tiny-v3 --dtype fp8`)
#     at tp 2 (hadamard, bf16 and fp8 output) - and that checkpoint itself.
# Both builds write to the same paths in turn (outputs record their own paths in places) and
# read the same inputs from this checkout; every file's SHA-256 is compared.
# Usage: scripts/check_byte_identity.sh OLD_BUILD_DIR NEW_BUILD_DIR WORK_DIR
#   STEP=old: only the old build's outputs (kept in WORK_DIR/old, with the text they were made
#   from); STEP=new: only the new build's, then the comparison. Default: both.
# Exit 0: identical; 1: a difference (listed) or a tool failed.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1") NEW=$(realpath "$2") WORK=$3 STEP=${STEP:-both}
if [ "$STEP" != new ]; then
  rm -rf "$WORK" && mkdir -p "$WORK"
  # One fixed text for both sides: ~40 KB of this checkout's docs as byte tokens.
  cat README.md docs/math.md docs/design.md > "$WORK/text.bin"
fi
WORK=$(realpath "$WORK")

produce() {  # $1 build dir; writes everything under $WORK/out
  local B=$1 O=$WORK/out
  rm -rf "$O" && mkdir -p "$O"
  for m in tiny-v2 tiny-v3; do
    "$B/tools/mla-forward/mla-forward" -q capture "datasets/$m" --out "$O/$m-capture.h5" \
      --calib "$WORK/text.bin" --calib-seqs 48 --seq-len 128
    "$B/tools/mla-calibrate/mla-calibrate" -q --model "datasets/$m" --activations "$O/$m-capture.h5" \
      --tp 2,4 --pair-sequences 4 --queries 4 -o "$O/$m-calib.h5"
    for tp in 1 2; do
      for r in pca hadamard; do
        "$B/tools/mla-convert/mla-convert" -q --tp "$tp" --reparam "$r" --calib "$O/$m-calib.h5" \
          -o "$O/$m-tp$tp-$r" "datasets/$m"
      done
    done
  done
  "$B/tools/mla-synth/mla-synth" -q "$O/synth-v3-fp8" --preset tiny-v3 --dtype fp8 --seed 11
  for d in bf16 fp8; do
    "$B/tools/mla-convert/mla-convert" -q --tp 2 --reparam hadamard --seed 5 --out-dtype "$d" \
      -o "$O/synth-v3-fp8-tp2-$d" "$O/synth-v3-fp8"
  done
}

hashes() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

if [ "$STEP" != new ]; then produce "$OLD" && mv "$WORK/out" "$WORK/old"; fi
[ "$STEP" = old ] && exit 0
rm -rf "$WORK/new"
produce "$NEW" && mv "$WORK/out" "$WORK/new"
hashes "$WORK/old" > "$WORK/old.sha256"
hashes "$WORK/new" > "$WORK/new.sha256"
files=$(wc -l < "$WORK/old.sha256")
bytes=$(du -sb "$WORK/old" | cut -f1)
if diff "$WORK/old.sha256" "$WORK/new.sha256"; then
  echo "byte identity: $files files ($bytes bytes) identical; SHA-256 lists in $WORK/{old,new}.sha256"
else
  echo "byte identity: DIFFERENCES (above; < old, > new)"
  exit 1
fi
