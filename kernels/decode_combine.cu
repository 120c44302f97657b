// Combine: one block per (request, row) merges the request's splits by natural-log LSE in
// fp32 (decode_store.cuh's merge_splits_row) and rounds the output to bf16 once. Requests with
// one split were written by the split kernel and are skipped.
#include "kernels/decode_launch.hpp"
#include "kernels/decode_store.cuh"

namespace mla::kernels::detail {
namespace {

__global__ void decode_combine_kernel(const quant::Bf16DecodeParams p, const int32_t* __restrict__ offsets,
                                      const float* __restrict__ o_acc, const float* __restrict__ lse_acc) {
  griddep_wait();  // the split kernel's partials are complete from here on
  const int b = blockIdx.x, r = blockIdx.y;
  const int s0 = offsets[b], s1 = offsets[b + 1];
  if (s1 - s0 <= 1) return;  // written directly by the split kernel
  merge_splits_row(p, o_acc, lse_acc, b, r, s0, s1, threadIdx.x, blockDim.x);
}

}  // namespace

void launch_combine(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  launch(decode_combine_kernel, dim3(p.batch, p.s_q * p.heads), dim3(64), 0, stream, use_pdl(p), "combine launch", p,
         static_cast<const int32_t*>(w.offsets), static_cast<const float*>(w.o_acc),
         static_cast<const float*>(w.lse_acc));
}

}  // namespace mla::kernels::detail
