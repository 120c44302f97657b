// Paged cache append (see cache_append.hpp): one block per (new token, request), 16-byte copies.
#include "kernels/cache_append.hpp"

#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"

namespace mla::kernels {
namespace {

__global__ void cache_append_kernel(const CacheAppendParams p) {
  const int i = blockIdx.x, b = blockIdx.y;
  const long long pos = static_cast<long long>(p.positions[b]) + i;
  const long long slot = pos / p.page_size;
  if (pos < 0 || slot >= p.max_pages) {
    if (threadIdx.x == 0 && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
    return;
  }
  const int page = p.page_table[static_cast<size_t>(b) * p.max_pages + slot];
  if (page < 0 || page >= p.num_pages) {
    if (threadIdx.x == 0 && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(p.kv_new + (static_cast<size_t>(b) * p.n_new + i) * p.dim);
  uint4* dst = reinterpret_cast<uint4*>(p.kv_cache + (static_cast<size_t>(page) * p.page_size + pos % p.page_size) * p.dim);
  for (int c = threadIdx.x; c < p.dim / 8; c += blockDim.x) dst[c] = src[c];
}

}  // namespace

void cache_append_bf16(const CacheAppendParams& p, cudaStream_t stream) {
  auto bad = [](const std::string& what) { throw InputError("cache append params: " + what); };
  if (!p.kv_new || !p.positions || !p.page_table || !p.kv_cache) bad("a pointer is null");
  if (p.batch < 1 || p.batch > 65535) bad("batch = " + std::to_string(p.batch) + " (supported: 1..65535)");
  if (p.n_new < 1) bad("n_new = " + std::to_string(p.n_new) + " (must be >= 1)");
  if (p.dim < 8 || p.dim % 8 != 0) bad("dim = " + std::to_string(p.dim) + " (must be a positive multiple of 8)");
  if (p.page_size < 1) bad("page_size = " + std::to_string(p.page_size));
  if (p.max_pages < 1) bad("max_pages = " + std::to_string(p.max_pages));
  if (p.num_pages < 1) bad("num_pages = " + std::to_string(p.num_pages));
  cache_append_kernel<<<dim3(p.n_new, p.batch), 64, 0, stream>>>(p);
  cuda::check(cudaGetLastError(), "cache append launch");
}

}  // namespace mla::kernels
