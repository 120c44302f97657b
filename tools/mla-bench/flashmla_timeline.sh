#!/usr/bin/env bash
# FlashMLA's own tile by the SM clock, beside ours (GPU machine, repo root, .peer carried): extracts
# a copy of the FlashMLA source bundle (.peer/flashmla-src.tar.xz) under $WORK, puts the clock events
# in (tools/mla-bench/flashmla_timeline_patch.py), builds it (~3 min on 16 cores, sm90 only) and runs
# tools/mla-bench/timeline.py --kernel flashmla for each shape in $SHAPES ("heads s_q seqlen", ';'
# between shapes). The copy is never the peer the timing scripts use (.peer/flashmla stays as it is),
# and $WORK is removed when the script ends, however it ends (a failed build's log goes to $OUT first).
# Usage: OUT=dir [SHAPES="128 1 8192;128 2 8192;128 1 32768"] bash tools/mla-bench/flashmla_timeline.sh
set -uo pipefail
OUT=${OUT:-/tmp/mla-out} WORK=${WORK:-/tmp/flashmla-timeline}
SHAPES=${SHAPES:-"128 1 8192;128 2 8192;128 1 32768"}
mkdir -p "$OUT"
[ -f .peer/flashmla-src.tar.xz ] || { echo "flashmla_timeline: no .peer/flashmla-src.tar.xz (carry .peer)" >&2; exit 1; }
T0=$(date +%s)
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
trap 'rm -rf "$WORK"' EXIT
tar -C "$WORK" -xJf .peer/flashmla-src.tar.xz || exit 1
src="$WORK/peer-flashmla-src"
python3 tools/mla-bench/flashmla_timeline_patch.py "$src" || exit 1
(cd "$src" && FLASH_MLA_DISABLE_SM100=1 CPLUS_INCLUDE_PATH=/usr/local/cuda/include/cccl \
  MAX_JOBS=16 NVCC_THREADS=4 python3 setup.py build_ext --inplace > "$WORK/build.log" 2>&1) ||
  { cp "$WORK/build.log" "$OUT/flashmla_timeline_build.log"; tail -20 "$WORK/build.log"
    echo "flashmla_timeline: build failed (log: $OUT/flashmla_timeline_build.log)" >&2; exit 1; }
echo "flashmla_timeline: built in $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$src:$src/tests:$PWD/tools/mla-bench PYTHONUNBUFFERED=1
IFS=';' read -ra list <<< "$SHAPES"
for shape in "${list[@]}"; do
  read -r h sq len <<< "$shape"
  timeout 90 python3 tools/mla-bench/timeline.py --kernel flashmla --heads "$h" --s-q "$sq" --seqlen "$len" \
    --json "$OUT/tl_flashmla_h${h}_sq${sq}_l${len}.json" 2>&1 | tail -24
  echo "rc=$? ($(( $(date +%s) - T0 )) s)"
done
