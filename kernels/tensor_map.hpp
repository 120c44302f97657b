#pragma once
// cuTensorMapEncodeTiled through the runtime's driver entry point, so nothing links -lcuda: the TMA
// descriptors of the wgmma decode paths (decode_schedule.cu) and of the wgmma prefix attention
// (prefix_attention_wgmma.cu). Host code only.
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.hpp"

namespace mla::cuda {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled (CUDA 12.0 ABI), looked up on first use (a function-local
// static: thread-safe when the ranks' threads of the multi-GPU runner build their maps at once).
inline EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q),
          "driver entry point cuTensorMapEncodeTiled");
    if (f == nullptr || q != cudaDriverEntryPointSuccess)
      throw Error("CUDA: driver entry point cuTensorMapEncodeTiled not found (query result " + std::to_string(q) + ")");
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

}  // namespace mla::cuda
