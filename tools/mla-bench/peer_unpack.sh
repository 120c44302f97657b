#!/usr/bin/env bash
# Unpacks the FlashMLA peer on the GPU machine (repo root), for scripts that import it from
# .peer/flashmla. The git-ignored .peer/ holds either a prebuilt bundle
# (flashmla-built.tar.xz: the flash_mla package with its sm90 extension, built on the device
# image from deepseek-ai/FlashMLA 9241ae3 + CUTLASS 147f567, and FlashMLA's tests) or the
# source bundle (flashmla-src.tar.xz), which is then built here (~2 min on 16 cores).
# Nothing of FlashMLA is committed; see docs/benchmarks.md for how the bundles are made.
set -euo pipefail
[ -d .peer/flashmla/flash_mla ] && python3 -c "import sys; sys.path.insert(0, '.peer/flashmla'); import flash_mla" 2>/dev/null && exit 0
if [ -f .peer/flashmla-built.tar.xz ]; then
  tar -C .peer -xJf .peer/flashmla-built.tar.xz
  python3 -c "import sys; sys.path.insert(0, '.peer/flashmla'); import flash_mla" && exit 0
  echo "prebuilt FlashMLA does not import here; building from source" >&2
fi
[ -f .peer/flashmla-src.tar.xz ] || { echo "no FlashMLA bundle in .peer/ (carry .peer)" >&2; exit 1; }
rm -rf .peer/flashmla .peer/peer-flashmla-src
tar -C .peer -xJf .peer/flashmla-src.tar.xz && mv .peer/peer-flashmla-src .peer/flashmla
(cd .peer/flashmla && FLASH_MLA_DISABLE_SM100=1 CPLUS_INCLUDE_PATH=/usr/local/cuda/include/cccl \
  MAX_JOBS=16 NVCC_THREADS=4 python3 setup.py build_ext --inplace > /tmp/flashmla_build.log 2>&1) ||
  { tail -20 /tmp/flashmla_build.log; exit 1; }
