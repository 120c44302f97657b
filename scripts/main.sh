#!/usr/bin/env bash
# Sets up, builds and runs the main job on the shipped default checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/build.sh
CKPT=${1:-datasets/synthetic/tiny-v3}
./build/tools/mla-inspect/mla-inspect "$CKPT"
