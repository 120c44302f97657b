#!/usr/bin/env bash
# CTest (label unit, CUDA builds): cmake/wgmma_guard.sh fails the compile of probe.cu when ptxas
# serialises its wgmmas and passes the same kernel without the serialising wait, so a new nvcc that
# words the message differently cannot turn the guard into a silent no-op.
# Usage: check.sh NVCC REPO_ROOT
set -uo pipefail
nvcc=$1 root=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/mla-guard-check.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
compile() {
  bash "$root/cmake/wgmma_guard.sh" "$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -I"$root" -I"$root/lib" "$@" -c "$root/tests/kernels/wgmma_guard/probe.cu" -o "$dir/probe.o"
}
if ! compile > "$dir/clean.log" 2>&1; then
  echo "FAIL: the guard rejected the probe without the serialising wait:"; cat "$dir/clean.log"; exit 1
fi
[ -f "$dir/probe.o" ] || { echo "FAIL: no object from the clean compile"; exit 1; }
rm -f "$dir/probe.o"
if compile -DMLA_GUARD_PROBE_SERIALISED > "$dir/serialised.log" 2>&1; then
  echo "FAIL: the guard passed a kernel whose wgmmas ptxas serialises:"; cat "$dir/serialised.log"; exit 1
fi
grep -q "error: ptxas serialised the wgmma instructions" "$dir/serialised.log" ||
  { echo "FAIL: the serialised compile failed for another reason:"; cat "$dir/serialised.log"; exit 1; }
[ ! -e "$dir/probe.o" ] || { echo "FAIL: the guard left the rejected object behind"; exit 1; }
echo "ok: the guard passes the clean probe and rejects the serialised one"
