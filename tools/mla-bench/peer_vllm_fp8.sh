#!/usr/bin/env bash
# Builds vLLM's FlashMLA dense FP8 decode (peer_bundle_vllm_fp8.sh) on the GPU machine (repo
# root) as the Python module flash_mla_dense_fp8 in .peer/vllm_fp8, for peer_fp8.py's third peer
# column. Needs the FlashMLA peer unpacked first (peer_unpack.sh): its CUTLASS headers are used.
# The compile flags are those vLLM's fork builds the kernel with. One translation unit: ~35 s.
set -euo pipefail
D=.peer/vllm_fp8
# Built already when it imports (as peer_unpack.sh checks FlashMLA): a build killed or failed half way
# leaves no module that imports, so it is built again.
python3 -c "import sys; sys.path.insert(0, '$D'); import torch, flash_mla_dense_fp8" 2>/dev/null && exit 0
[ -f .peer/vllm-fp8-src.tar.xz ] || { echo "no .peer/vllm-fp8-src.tar.xz (peer_bundle_vllm_fp8.sh, carry .peer)" >&2; exit 1; }
CUTLASS=$PWD/.peer/flashmla/csrc/cutlass
[ -d "$CUTLASS/include/cute" ] || { echo "no CUTLASS at $CUTLASS (run peer_unpack.sh first)" >&2; exit 1; }
rm -rf $D .peer/peer-vllm-fp8-src
tar -C .peer -xJf .peer/vllm-fp8-src.tar.xz && mv .peer/peer-vllm-fp8-src $D
cat > $D/setup.py <<PY
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
k = "csrc/extension/sm90/dense_fp8/"
nvcc = ["-O3", "-std=c++17", "-DNDEBUG", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
        "--use_fast_math", "--ptxas-options=-v,--register-usage-level=10", "-DNO_PYBIND11=1",
        "-gencode", "arch=compute_90a,code=sm_90a"]
setup(name="flash_mla_dense_fp8", cmdclass={"build_ext": BuildExtension},
      ext_modules=[CUDAExtension("flash_mla_dense_fp8",
                                 [k + "pybind.cpp", k + "flash_fwd_mla_fp8_sm90.cu", k + "flash_fwd_mla_metadata.cu"],
                                 include_dirs=["$PWD/$D/csrc", "$PWD/$D/" + k, "$CUTLASS/include", "$CUTLASS/tools/util/include"],
                                 extra_compile_args={"cxx": ["-O3", "-std=c++17", "-DNDEBUG", "-DNO_PYBIND11=1"],
                                                     "nvcc": nvcc})])
PY
(cd $D && CPLUS_INCLUDE_PATH=/usr/local/cuda/include/cccl MAX_JOBS=16 python3 setup.py build_ext --inplace \
  > /tmp/vllm_fp8_build.log 2>&1) || { grep -E "error" /tmp/vllm_fp8_build.log | head -20; tail -20 /tmp/vllm_fp8_build.log; exit 1; }
python3 -c "import sys; sys.path.insert(0, '$D'); import torch, flash_mla_dense_fp8" && echo "built $D: $(cat $D/PEER_COMMITS)"
