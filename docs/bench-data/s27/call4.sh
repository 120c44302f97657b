#!/usr/bin/env bash
# Session 27, call 4 (nvidia-h200, carry .carry): every CTA's span (globaltimer and clock64 at its start and end,
# MLA_TL_SPAN) beside CTA (0, 0)'s tiles, for call 1's change (this tree) and the base (.carry/base_v6.cu =
# e18e28b's v6 with the two span records, i.e. the final tree's kernels/decode_manyhead_v6.cu), 128 rows 8K and 32K and 256 rows 8K, one call after two warm-ups.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/base-src -xf -
cp .carry/base_v6.cu /tmp/base-src/kernels/decode_manyhead_v6.cu
build() {  # src dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON \
    > /dev/null 2>&1 && cmake --build "$2" -j8 --target mla_decode_capi > "$OUT/build_$(basename $2).log" 2>&1
}
build . /tmp/tn & build /tmp/base-src /tmp/tb & wait
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for shape in "1 8192" "1 32768" "2 8192"; do
  set -- $shape
  for b in tn tb; do
    echo "=== $([ $b = tn ] && echo new || echo base) h128 sq$1 L$2"
    timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/$b/tools/mla-bench/libmla_decode_capi.so \
      --heads 128 --s-q $1 --seqlen $2 --json "$OUT/tl_${b}_sq$1_l$2.json" 2>&1 | grep -v "behind" | tail -20
  done
done
echo "call total $(( $(date +%s) - T0 )) s"
