#!/usr/bin/env bash
# (The .carry patches are archived here: s26A = v6-p-in-stage.patch, s26C / s26C2 / s26T (= C2) / s26D =
# v6-p-before-rs-{C,C2,C2,D}.patch; each applies on 4b8c76c. To rerun: cp the archived patch to .carry/.)
# Session 26, call 2 (nvidia-h200, carry .carry): v6's tile by the SM clock, the base (this tree with
# .carry/s26A.patch reversed: P buffer, barriers 3, 4, 6) beside the P-in-stage version (call 1: 2.5-3.5%
# slower), both built with -DMLA_TIMELINE=ON; timeline.py at 128 rows 8K / 32K and 256 rows 8K.
# PATCH=file: another change to reverse for the base (call4.sh).
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}; mkdir -p "$OUT"
T0=$(date +%s)
rm -rf /tmp/base-src && mkdir -p /tmp/base-src
tar --exclude=./.peer --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/base-src -xf -
(cd /tmp/base-src && patch -s -R -p1 < "$OLDPWD/${PATCH:-.carry/s26A.patch}") || { echo "patch -R failed"; exit 1; }
for t in new base; do
  src=.; [ $t = base ] && src=/tmp/base-src
  ( cmake -S $src -B /tmp/tl_$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_TIMELINE=ON > /tmp/cfg_$t.log 2>&1 &&
    cmake --build /tmp/tl_$t -j8 --target mla_decode_capi > /tmp/build_$t.log 2>&1; echo "$t build rc=$?" ) &
done
wait; echo "built $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD/tools/mla-bench PYTHONUNBUFFERED=1
for shape in "128 1 8192" "128 1 32768" "128 2 8192"; do
  set -- $shape
  for t in base new; do
    echo "=== $t h$1 sq$2 L$3"
    timeout 60 python3 tools/mla-bench/timeline.py --kernel v6 --lib /tmp/tl_$t/tools/mla-bench/libmla_decode_capi.so \
      --heads "$1" --s-q "$2" --seqlen "$3" --json "$OUT/tl_${t}_h$1_sq$2_l$3.json" 2>&1 | tail -20
  done
done
echo "call total $(( $(date +%s) - T0 )) s"
