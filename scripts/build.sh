#!/usr/bin/env bash
# Configures and builds into build/ (Release). CUDA is used when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${MLA_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$jobs"
