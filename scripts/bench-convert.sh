#!/usr/bin/env bash
# Conversion throughput against a durable copy (docs/benchmarks.md, "Conversion").
# Usage: scripts/bench-convert.sh BUILD_DIR INPUT_CHECKPOINT WORK_DIR LOG_DIR "THREADS..." [extra mla-convert args]
# For each step: outputs removed, `sync`, page cache dropped where permitted (root), then
#   cp -r INPUT + sync               (the durable copy)
#   mla-convert --tp 2 --threads T   (--profile, --json LOG_DIR/<name>-tT.json)
# and prints one line per step: wall seconds, ratio to the durable copy. Each run's
# manifest.json (the SHA-256 of every output file) is kept and compared with the first
# run's: the outputs must be byte-identical for every thread count.
set -euo pipefail
build=$1 input=$2 work=$3 logs=$4 threads=$5
shift 5
extra=("$@")
convert="$build/tools/mla-convert/mla-convert"
name=$(basename "$input")
mkdir -p "$work" "$logs"
profile=()
if "$convert" --help | grep -q -- --profile; then profile=(--profile); fi  # older builds lack it

drop_caches() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; else echo "(page cache not dropped: no permission)"; fi
}
now() { date +%s.%N; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
tag=$(echo "${extra[*]:-}" | tr -c 'a-z0-9\n' '_')

rm -rf "$work/copy" "$work/out"
drop_caches
t0=$(now)
cp -r "$input" "$work/copy" && sync
t1=$(now)
copy=$(minus "$t1" "$t0")
printf '%s: cp -r + sync %.2f s (%s bytes)\n' "$name" "$copy" "$(du -sb "$input" | cut -f1)"
rm -rf "$work/copy"

for t in $threads; do
  rm -rf "$work/out"
  drop_caches
  t0=$(now)
  base="$logs/$name-t$t${tag:+-$tag}"
  "$convert" "$input" -o "$work/out" --tp 2 --threads "$t" "${profile[@]}" -q --json "$base.json" "${extra[@]}" > "$base.txt"
  t1=$(now)
  wall=$(minus "$t1" "$t0")
  printf '%s: mla-convert --threads %s %s: %.2f s wall (%sx the durable copy)\n' "$name" "$t" "${extra[*]:-}" "$wall" \
    "$(ratio "$wall" "$copy")"
  cat "$base.txt"
  cp "$work/out/manifest.json" "$base.manifest.json"
  first=${first:-$base.manifest.json}
  if cmp -s "$first" "$base.manifest.json"; then echo "manifest identical to $(basename "$first")"; else echo "MANIFEST DIFFERS from $(basename "$first")"; fi
done
rm -rf "$work/out"
