// Combine: merges each request's splits by natural-log LSE in fp32 (decode_store.cuh's
// merge_splits_row) and rounds the output to bf16 once. Requests with one split were written by
// the split kernel and are skipped. A block takes kCombineRows rows of one request, a warp per
// row, d_c a template parameter so that a lane's column loads are unrolled: with a block per
// (request, row) the launch cost 11 us at B = 128, 128 rows on an H200 even when no request had a
// split (16,384 blocks that return at once; docs/gpu-notes.md, session 14). Each element's
// expression and order are merge_splits_row's, whatever the lanes.
#include "kernels/decode_launch.hpp"
#include "kernels/decode_store.cuh"

namespace mla::kernels::detail {
namespace {

constexpr int kCombineRows = 16;  // rows (warps) per block

template <int DC>
__global__ void __launch_bounds__(32 * kCombineRows)
    decode_combine_kernel(const quant::Bf16DecodeParams p, const int32_t* __restrict__ offsets,
                          const float* __restrict__ o_acc, const float* __restrict__ lse_acc) {
  griddep_wait();  // the split kernel's partials are complete from here on
  const int b = blockIdx.x;
  const int s0 = offsets[b], s1 = offsets[b + 1];
  if (s1 - s0 <= 1) return;  // written directly by the split kernel
  const int r = blockIdx.y * kCombineRows + threadIdx.x / 32;
  if (r >= p.s_q * p.heads) return;
  merge_splits_row<DC>(p, o_acc, lse_acc, b, r, s0, s1, threadIdx.x % 32);
}

template <int DC>
void launch_for_dc(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  const int row_chunks = (p.s_q * p.heads + kCombineRows - 1) / kCombineRows;
  launch(decode_combine_kernel<DC>, dim3(p.batch, row_chunks), dim3(32 * kCombineRows), 0, stream, use_pdl(p),
         "combine launch", p, static_cast<const int32_t*>(w.offsets), static_cast<const float*>(w.o_acc),
         static_cast<const float*>(w.lse_acc));
}

}  // namespace

void launch_combine(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  switch (p.d_c) {  // the latent widths quant::validate_decode_params accepts
    case 32: launch_for_dc<32>(p, w, stream); break;
    case 64: launch_for_dc<64>(p, w, stream); break;
    case 128: launch_for_dc<128>(p, w, stream); break;
    case 256: launch_for_dc<256>(p, w, stream); break;
    case 512: launch_for_dc<512>(p, w, stream); break;
    default: throw InputError("mla decode params: d_c = " + std::to_string(p.d_c) + " in the combine");
  }
}

}  // namespace mla::kernels::detail
