// CUDA side of verify-decode --shared-prefix: uploads the step, runs the kernels on one stream,
// downloads. Compiled only when the build has CUDA (MLA_HAVE_CUDA); otherwise it says so.
#include "core/error.hpp"
#include "verify/shared_prefix_backend.hpp"

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
  quant::PrefixDecompressParams p;
  p.kv_cache = cache.ptr;
  p.page_table = table.ptr;
  p.kv_b = kv_b.ptr;
  p.k = k.ptr;
  p.v = v.ptr;
  p.prefix_len = s.prefix_len;
  p.num_pages = s.num_pages;
  p.page_size = s.page_size;
  p.max_pages = s.prefix_pages;
  p.heads = s.heads;
  p.d_c = s.d_c;
  p.d_r = s.d_r;
  p.d_n = s.d_n;
  p.d_v = s.d_v;
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
  quant::MixedDecodeParams p;
  quant::Bf16DecodeParams& d = p.suffix;
  d.q = q_abs.ptr;
  d.kv_cache = cache.ptr;
  d.page_table = table.ptr;
  d.seqlens = own_len.ptr;
  d.out = o_lat.ptr;
  d.lse = lse_lat.ptr;
  d.batch = s.batch;
  d.heads = s.heads;
  d.d_c = s.d_c;
  d.d_r = s.d_r;
  d.num_pages = s.num_pages;
  d.page_size = s.page_size;
  d.max_pages = s.own_max_pages;
  d.scale = s.scale;
  Dev<char> ws(kernels::decode_workspace_bytes_for(d));
  d.workspace = ws.ptr;
  d.workspace_bytes = ws.count;
  p.q_naive = q_naive.ptr;
  p.prefix_k = k.ptr;
  p.prefix_v = v.ptr;
  p.prefix_len = s.prefix_len;
  p.kv_b = kv_b.ptr;
  p.d_n = s.d_n;
  p.d_v = s.d_v;
  p.out = out.ptr;
  p.lse = lse.ptr;
  p.b_theta = 0.0;
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
