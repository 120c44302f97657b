#!/usr/bin/env bash
# Makes .peer/flashmla-src.tar.xz, the FlashMLA source bundle that peer_unpack.sh builds on the
# GPU machine, from fetched snapshots of deepseek-ai/FlashMLA and NVIDIA/cutlass (the session's
# `fetch` tool puts them under /work/.mirror). Nothing of FlashMLA is committed: .peer/ is
# git-ignored, and the bundle is carried to the device (`carry: [".peer"]`).
# The bundle: `git archive` of FlashMLA at FLASHMLA_COMMIT with cutlass's include/ and
# tools/util/include/ at the submodule's commit in csrc/cutlass (all FlashMLA's build reads),
# under the folder peer-flashmla-src/. ~30 MB unpacked, ~4 MB as xz: the tree plus it fits the
# device tool's 64 MiB where the unpacked sources would not.
# Usage (repo root): bash tools/mla-bench/peer_bundle.sh [FLASHMLA_GIT_DIR] [CUTLASS_GIT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
FLASHMLA=${1:-/work/.mirror/deepseek-ai+FlashMLA/repo}
CUTLASS=${2:-/work/.mirror/NVIDIA+cutlass/repo}
FLASHMLA_COMMIT=${FLASHMLA_COMMIT:-9241ae3}   # the commit every recorded peer figure used
for d in "$FLASHMLA" "$CUTLASS"; do
  git -C "$d" rev-parse --git-dir > /dev/null 2>&1 || { echo "not a git directory: $d (fetch it first)" >&2; exit 1; }
done
# The cutlass commit FlashMLA pins, read from its tree (a gitlink), not assumed.
CUTLASS_COMMIT=$(git -C "$FLASHMLA" ls-tree "$FLASHMLA_COMMIT" csrc/cutlass | awk '$2 == "commit" {print $3}')
[ -n "$CUTLASS_COMMIT" ] || { echo "FlashMLA $FLASHMLA_COMMIT has no csrc/cutlass submodule entry" >&2; exit 1; }
git -C "$CUTLASS" cat-file -e "$CUTLASS_COMMIT^{commit}" 2> /dev/null ||
  { echo "cutlass $CUTLASS_COMMIT (pinned by FlashMLA $FLASHMLA_COMMIT) is not in $CUTLASS" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$tmp/peer-flashmla-src
mkdir -p "$src/csrc/cutlass"
git -C "$FLASHMLA" archive "$FLASHMLA_COMMIT" | tar -x -C "$src"
git -C "$CUTLASS" archive "$CUTLASS_COMMIT" include tools/util/include | tar -x -C "$src/csrc/cutlass"
echo "FlashMLA $(git -C "$FLASHMLA" rev-parse "$FLASHMLA_COMMIT"), cutlass $CUTLASS_COMMIT" > "$src/PEER_COMMITS"
mkdir -p .peer
tar -C "$tmp" -cf - peer-flashmla-src | xz -T0 -6 > "$tmp/bundle.tar.xz"
mv "$tmp/bundle.tar.xz" .peer/flashmla-src.tar.xz
echo "wrote .peer/flashmla-src.tar.xz ($(du -h .peer/flashmla-src.tar.xz | cut -f1)): $(cat "$src/PEER_COMMITS")"
