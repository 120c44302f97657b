#!/usr/bin/env bash
# The CUDA compiler launcher of the kernels (kernels/CMakeLists.txt, option MLA_WGMMA_GUARD): runs
# the compile as given and fails it when ptxas reports that it serialised the wgmma instructions
# of a kernel ("Potential Performance Loss: wgmma.mma_async instructions are serialized ...",
# C7514-C7520) or injected a wait for them that the code did not ask for ("warpgroup.wait is
# injected", C7517). ptxas prints both as information and the object still builds, but the
# kernel's wgmmas then wait for each other: session 17 compile-checked a patch by grepping
# three of those codes, missed C7520, and its S ran 2.7x slower on the GPU (docs/gpu-notes.md,
# session 18). Everything the compiler prints is passed on; its exit status is kept.
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/mla-wgmma-guard.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2> "$log"
rc=$?
cat "$log" >&2
if [ "$rc" -eq 0 ] && grep -q -E "wgmma.mma_async instructions are serialized|warpgroup.wait is injected" "$log"; then
  src=$(printf '%s\n' "$@" | grep -E '\.cu$' | tail -1)
  prev="" obj=""
  for a in "$@"; do [ "$prev" = "-o" ] && obj=$a; prev=$a; done
  [ -n "$obj" ] && rm -f "$obj"  # so that no build tool takes the object for up to date
  echo "error: ptxas serialised the wgmma instructions of a kernel in ${src:-this file} (the ptxas lines" \
       "above, 'wgmma.mma_async instructions are serialized' or 'warpgroup.wait is injected', name the function); fix the code, or configure with" \
       "-DMLA_WGMMA_GUARD=OFF for an experiment that accepts it" >&2
  exit 1
fi
exit "$rc"
