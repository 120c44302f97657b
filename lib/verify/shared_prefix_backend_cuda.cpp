// CUDA side of verify-decode --shared-prefix: uploads the step, runs the kernels on one stream,
// downloads. Compiled only when the build has CUDA (MLA_HAVE_CUDA); otherwise it says so.
#include "core/error.hpp"
#include "verify/shared_prefix_backend.hpp"
#include "verify/shared_prefix_params.hpp"

#if MLA_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/mla_decode.hpp"
#include "kernels/prefix_attention.hpp"

namespace mla::verify {
namespace {

void check(cudaError_t e, const char* what) { cuda::check(e, what, "CUDA (shared prefix)"); }

template <typename T>
using Dev = cuda::DeviceBuffer<T>;

}  // namespace

void shared_prefix_decompress_cuda(SharedPrefixStep& s) {
  Dev<uint16_t> cache(s.cache), kv_b(s.kv_b);
  Dev<int32_t> table(s.prefix_table);
  Dev<uint16_t> k(static_cast<size_t>(s.prefix_len) * s.heads * (s.d_n + s.d_r));
  Dev<uint16_t> v(static_cast<size_t>(s.prefix_len) * s.heads * s.d_v);
  const quant::PrefixDecompressParams p = prefix_decompress_params(s, cache.ptr, table.ptr, kv_b.ptr, k.ptr, v.ptr);
  kernels::prefix_decompress_bf16(p, nullptr);
  check(cudaDeviceSynchronize(), "decompress");
  k.download(s.k);
  v.download(s.v);
}

void shared_prefix_decode_cuda(SharedPrefixStep& s) {
  Dev<uint16_t> cache(s.cache), kv_b(s.kv_b), q_naive(s.q_naive), q_abs(s.q_abs), k(s.k), v(s.v);
  Dev<int32_t> table(s.own_table), own_len(s.own_len);
  Dev<uint16_t> o_lat(static_cast<size_t>(s.batch) * s.heads * s.d_c), out(static_cast<size_t>(s.batch) * s.heads * s.d_v);
  Dev<float> lse_lat(static_cast<size_t>(s.batch) * s.heads), lse(static_cast<size_t>(s.batch) * s.heads);
  quant::MixedDecodeParams p =
      mixed_decode_params(s, {q_abs.ptr, cache.ptr, table.ptr, own_len.ptr, o_lat.ptr, lse_lat.ptr, q_naive.ptr, k.ptr,
                              v.ptr, kv_b.ptr, out.ptr, lse.ptr});
  quant::Bf16DecodeParams& d = p.suffix;
  Dev<char> ws(kernels::decode_workspace_bytes_for(d));
  d.workspace = ws.ptr;
  d.workspace_bytes = ws.count;
  Dev<char> pws(kernels::mixed_prefix_workspace_bytes(p));
  p.prefix_workspace = pws.ptr;
  p.prefix_workspace_bytes = pws.count;
  kernels::mixed_decode_bf16(p, nullptr);
  check(cudaDeviceSynchronize(), "mixed decode");
  out.download(s.out);
  lse.download(s.lse);
}

}  // namespace mla::verify

#else

namespace mla::verify {
void shared_prefix_decompress_cuda(SharedPrefixStep&) {
  throw Error("--device cuda: this build has no CUDA (configure with -DMLA_ENABLE_CUDA=ON)");
}
void shared_prefix_decode_cuda(SharedPrefixStep&) {
  throw Error("--device cuda: this build has no CUDA (configure with -DMLA_ENABLE_CUDA=ON)");
}
}  // namespace mla::verify

#endif
