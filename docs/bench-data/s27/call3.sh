#!/usr/bin/env bash
# Session 27, call 3 (nvidia-h200, carry .carry): the first and the last tiles of CTA (0, 0) by the clock, for
# call 1's change (this tree) and the base (.carry/s27dpv.patch reversed: docs/bench-data/s27/s27dpv.patch), 128 rows 8K and 32K, default parts.
# Call 2 measured the change 3-4% *more* cycles per call than the base at the sustained clock, while call 1's
# timeline (the ring: the run's last ~146 tiles) had it 10% fewer a tile: MLA_TIMELINE_FIRST keeps the first.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/base-src -xf -
(cd /tmp/base-src && patch -s -R -p1 < "$OLDPWD/.carry/s27dpv.patch") || { echo "patch -R failed"; exit 1; }
build() {  # src dir, build dir, first (ON/OFF)
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON \
    -DMLA_TIMELINE_FIRST="$3" > /dev/null 2>&1 && cmake --build "$2" -j8 --target mla_decode_capi > "$OUT/build_$(basename $2).log" 2>&1
}
build . /tmp/tn ON & build /tmp/base-src /tmp/tb ON & build . /tmp/tnl OFF & build /tmp/base-src /tmp/tbl OFF & wait
echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for L in 8192 32768; do
  for b in tn tb tnl tbl; do
    echo "=== $b (tn/tb: new/base first events; tnl/tbl: last) h128 sq1 L$L"
    timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/$b/tools/mla-bench/libmla_decode_capi.so \
      --heads 128 --s-q 1 --seqlen $L 2>&1 | grep -v "behind" | tail -14
  done
done
echo "call total $(( $(date +%s) - T0 )) s"
