// FP8 cache append and query quantisation (fp8_append.hpp): one warp per token row, the row
// encoders of kernels/fp8_encode.cuh (the twin's arithmetic, operation for operation).
#include "kernels/fp8_append.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/fp8_encode.cuh"

namespace mla::kernels {
namespace {

using namespace fp8enc;

constexpr int kWarpsPerBlock = 4;

// Token i of request b (one warp).
__device__ void append_token(const Fp8AppendParams& p, int i, int b, int lane) {
  const long long pos = static_cast<long long>(p.positions[b]) + i;
  const long long slot = pos / p.page_size;
  if (pos < 0 || slot >= p.max_pages) {
    if (lane == 0 && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
    return;
  }
  const int page = p.page_table[static_cast<size_t>(b) * p.max_pages + slot];
  if (page < 0 || page >= p.num_pages) {
    if (lane == 0 && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
    return;
  }
  const quant::Fp8CacheLayout l{p.page_size, p.d_c, p.d_r};
  uint8_t* base = p.cache + static_cast<size_t>(page) * l.page_bytes();
  const int t = static_cast<int>(pos % p.page_size);
  const uint16_t* src = p.kv_new + (static_cast<size_t>(b) * p.n_new + i) * (p.d_c + p.d_r);
  encode_row(
      src, p.d_c, p.d_r, lane, [&](int c, uint8_t v) { base[l.latent_byte(t, c)] = v; },
      [&](int c, uint16_t v) { *reinterpret_cast<uint16_t*>(base + l.rope_byte(t, c)) = v; },
      [&](float s) { *reinterpret_cast<float*>(base + l.scale_byte(t)) = s; });
}

__global__ void fp8_append_kernel(const Fp8AppendParams p) {
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (i >= p.n_new) return;
  for (int b = blockIdx.y; b < p.batch; b += gridDim.y) append_token(p, i, b, lane);
}

__global__ void fp8_query_kernel(const uint16_t* q, int rows, int d_c, int d_r, uint8_t* q8, uint16_t* q_rope,
                                 float* q_scale, bool vec) {
  const int r = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (r < rows) quantize_query_row_any(vec, q, r, d_c, d_r, q8, q_rope, q_scale, threadIdx.x & 31);
}

}  // namespace

void fp8_cache_append(const Fp8AppendParams& p, cudaStream_t stream) {
  auto bad = [](const std::string& what) { throw InputError("fp8 cache append params: " + what); };
  if (!p.kv_new || !p.positions || !p.page_table || !p.cache) bad("a pointer is null");
  if (p.batch < 1) bad("batch = " + std::to_string(p.batch) + " (must be >= 1)");
  if (p.n_new < 1) bad("n_new = " + std::to_string(p.n_new) + " (must be >= 1)");
  if (p.max_pages < 1) bad("max_pages = " + std::to_string(p.max_pages));
  if (p.num_pages < 1) bad("num_pages = " + std::to_string(p.num_pages));
  const bool dc_ok = p.d_c == 16 || p.d_c == 32 || p.d_c == 64 || (p.d_c > 0 && p.d_c % 128 == 0);
  const bool dr_ok = p.d_r == 8 || p.d_r == 16 || p.d_r == 32 || (p.d_r > 0 && p.d_r % 64 == 0);
  if (!dc_ok) bad("d_c = " + std::to_string(p.d_c) + " (supported: 16, 32, 64 or a multiple of 128)");
  if (!dr_ok) bad("d_r = " + std::to_string(p.d_r) + " (supported: 8, 16, 32 or a multiple of 64)");
  if (p.page_size < 1) bad("page_size = " + std::to_string(p.page_size));
  const dim3 grid((p.n_new + kWarpsPerBlock - 1) / kWarpsPerBlock, std::min(p.batch, 65535));
  fp8_append_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(p);
  cuda::check(cudaGetLastError(), "fp8 cache append launch");
}

void fp8_quantize_query(const uint16_t* q, int rows, int d_c, int d_r, uint8_t* q8, uint16_t* q_rope, float* q_scale,
                        cudaStream_t stream) {
  if (!q || !q8 || !q_rope || !q_scale) throw InputError("fp8 query quantisation: a pointer is null");
  if (rows < 1) throw InputError("fp8 query quantisation: rows = " + std::to_string(rows) + " (must be >= 1)");
  if (d_c < 1 || d_r < 0) throw InputError("fp8 query quantisation: d_c = " + std::to_string(d_c) + ", d_r = " + std::to_string(d_r));
  const int blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  fp8_query_kernel<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(q, rows, d_c, d_r, q8, q_rope, q_scale,
                                                               query_vec_ok(q, q8, q_rope, d_c, d_r));
  cuda::check(cudaGetLastError(), "fp8 query quantisation launch");
}

}  // namespace mla::kernels
