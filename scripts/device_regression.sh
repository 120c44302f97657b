#!/usr/bin/env bash
# One GPU-machine call after a change that moves code without meaning to change behaviour:
#  1. a full Release build of this tree with CUDA, and every CTest test with the GPU present
#     (unit, cli and gpu labels: the CLI tests then meet a real device too);
#  2. with BASE_PATCH=file (a `git diff BASE HEAD -- paths` made here and carried), the same tree
#     with that patch reversed is built too, and verify-decode --device cuda runs through the
#     BF16, FP8, FP4 and codebook CUDA backends with both builds on the same inputs: the JSON
#     outputs must be byte-identical (no CTest test drives the FP8 and 4-bit CUDA backends).
# Usage (repo root, on the device): OUT=dir [BASE_PATCH=.carry/x.patch] bash scripts/device_regression.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device-regression}
J=$(nproc)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/smi.txt" 2>&1
t0=$(date +%s)
cmake -S . -B /tmp/br -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/br -j"$J" >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
ctest --test-dir /tmp/br -j8 --output-on-failure > "$OUT/ctest.log" 2>&1
echo "ctest rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run" "$OUT/ctest.log" | head -20

[ -n "${BASE_PATCH:-}" ] || exit 0
t0=$(date +%s)
rm -rf /tmp/base-tree && mkdir /tmp/base-tree
tar --exclude=./.carry --exclude='./build*' --exclude=./.peer -cf - . | tar -C /tmp/base-tree -xf -
(cd /tmp/base-tree && patch -R -p1 -s < "$OLDPWD/$BASE_PATCH") || { echo "patch -R failed"; exit 1; }
cmake -S /tmp/base-tree -B /tmp/bb -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DMLA_BUILD_TESTS=OFF > "$OUT/base-build.log" 2>&1 &&
  cmake --build /tmp/bb -j"$J" --target verify-decode mla-forward mla-calibrate mla-convert >> "$OUT/base-build.log" 2>&1 ||
  { tail -40 "$OUT/base-build.log"; exit 1; }
echo "base build: $(( $(date +%s) - t0 )) s"
W=/tmp/reg-w M=datasets/tiny-v2 T=/tmp/br/tools
rm -rf $W && mkdir -p $W
$T/mla-forward/mla-forward -q capture $M --out $W/cap.h5 --calib docs/math.md --calib-seqs 10 --seq-len 64 \
  --eval docs/math.md --eval-seqs 2 || exit 1
$T/mla-calibrate/mla-calibrate -q --model $M --activations $W/cap.h5 --pair-sequences 2 --queries 4 --tp 2,8 -o $W/calib.h5 || exit 1
$T/mla-convert/mla-convert -q --tp 1 --reparam hadamard --seed 0 -o $W/tp1 $M || exit 1
same=0 differ=0
for kv in bf16 fp8 fp4 codebook; do
  extra=(); [[ $kv == fp4 || $kv == codebook ]] && extra=(--calib $W/calib.h5)
  for side in br bb; do
    /tmp/$side/tools/verify-decode/verify-decode -q --original $M --activations $W/cap.h5 --converted $W/tp1 \
      --prefill 40 --decode 12 --sequences 2 --device cuda --kv $kv "${extra[@]}" --json $W/$kv-$side.json \
      > $W/$kv-$side.txt 2>&1
    echo "verify-decode --kv $kv ($side): rc=$?"
  done
  if cmp -s $W/$kv-br.json $W/$kv-bb.json; then same=$((same + 1)); else differ=$((differ + 1)); echo "DIFFER: --kv $kv"; fi
done
cp $W/*-br.json "$OUT/" 2>/dev/null
echo "verify-decode --device cuda JSON: $same identical, $differ different (this tree vs BASE_PATCH reversed)"
