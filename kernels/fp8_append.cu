// FP8 cache append and query quantisation (fp8_append.hpp): one warp per token row. The
// arithmetic is the twin's (quant/fp8_cache_format.cpp) operation for operation: |x| max (exact
// in any order), s = max(amax, 1e-12) / 448 and x / s as IEEE fp32 divisions, E4M3 with round to
// nearest even and saturation (cvt.rn.satfinite), BF16 round to nearest even.
#include "kernels/fp8_append.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "quant/fp8_cache_layout.hpp"

namespace mla::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// The row's scale and one value's code: the twin's operations (IEEE divisions, E4M3 with round
// to nearest even and saturation, BF16 round to nearest even). Shared by both row encoders.
__device__ __forceinline__ float row_scale(float amax) {
  return __fdiv_rn(fmaxf(amax, quant::kFp8CacheTiny), quant::kFp8CacheMax);
}
__device__ __forceinline__ uint8_t latent_code(float x, float s) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x, s), __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ uint16_t rope_bits(float x, float s) {
  const __nv_bfloat16 r = __float2bfloat16_rn(__fdiv_rn(x, s));
  return *reinterpret_cast<const uint16_t*>(&r);
}

// Encodes one row (src: d_c + d_r bf16) with the 32 lanes of a warp; the callbacks store the
// latent byte i, the rope value i (bf16 bits) and the scale.
template <class StoreX, class StoreR, class StoreS>
__device__ void encode_row(const uint16_t* src, int d_c, int d_r, int lane, StoreX store_x, StoreR store_r,
                           StoreS store_s) {
  float amax = 0.f;
  bool finite = true;
  for (int i = lane; i < d_c + d_r; i += 32) {
    const float v = bf16_bits_to_float(src[i]);
    finite = finite && isfinite(v);
    if (i < d_c) amax = fmaxf(amax, fabsf(v));
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  finite = __all_sync(0xffffffffu, finite);
  if (!finite) {
    for (int i = lane; i < d_c; i += 32) store_x(i, uint8_t{0});
    for (int i = lane; i < d_r; i += 32) store_r(i, uint16_t{0});
    if (lane == 0) store_s(__uint_as_float(quant::kFp8PoisonScaleBits));
    return;
  }
  const float s = row_scale(amax);
  for (int i = lane; i < d_c; i += 32) store_x(i, latent_code(bf16_bits_to_float(src[i]), s));
  for (int i = lane; i < d_r; i += 32) store_r(i, rope_bits(bf16_bits_to_float(src[d_c + i]), s));
  if (lane == 0) store_s(s);
}

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

// The query's rows when d_c and d_r are multiples of 8: the row is read once into registers as
// 16-byte vectors (at most kMaxVec per lane: d_c + d_r <= 8 * 32 * kMaxVec) and written as
// 8-byte (latent) and 16-byte (RoPE) vectors; encode_row's arithmetic (row_scale, latent_code,
// rope_bits), element for element.
constexpr int kMaxVec = 3;
__global__ void fp8_query_vec_kernel(const uint16_t* q, int rows, int d_c, int d_r, uint8_t* q8, uint16_t* q_rope,
                                     float* q_scale) {
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const size_t rr = static_cast<size_t>(r);
  const int nv = (d_c + d_r) / 8, nvc = d_c / 8;
  const uint4* src = reinterpret_cast<const uint4*>(q + rr * (d_c + d_r));
  uint4 v[kMaxVec];
  float amax = 0.f;
  bool finite = true;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = lane + 32 * k;
    v[k] = j < nv ? src[j] : make_uint4(0u, 0u, 0u, 0u);
    const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = bf16_bits_to_float(static_cast<uint16_t>(w[e >> 1] >> (16 * (e & 1))));
      finite = finite && isfinite(x);
      if (j < nvc) amax = fmaxf(amax, fabsf(x));
    }
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  finite = __all_sync(0xffffffffu, finite);
  const float s = finite ? row_scale(amax) : __uint_as_float(quant::kFp8PoisonScaleBits);
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = lane + 32 * k;
    if (j >= nv) continue;
    const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
    if (j < nvc) {  // 8 latent values -> 8 E4M3 bytes
      uint32_t b[2] = {0u, 0u};
      if (finite) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float x = bf16_bits_to_float(static_cast<uint16_t>(w[e >> 1] >> (16 * (e & 1))));
          b[e >> 2] |= static_cast<uint32_t>(latent_code(x, s)) << (8 * (e & 3));
        }
      }
      *reinterpret_cast<uint2*>(q8 + rr * d_c + 8 * j) = make_uint2(b[0], b[1]);
    } else {  // 8 RoPE values -> 8 BF16
      uint32_t o[4] = {0u, 0u, 0u, 0u};
      if (finite) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float x = bf16_bits_to_float(static_cast<uint16_t>(w[e >> 1] >> (16 * (e & 1))));
          o[e >> 1] |= static_cast<uint32_t>(rope_bits(x, s)) << (16 * (e & 1));
        }
      }
      *reinterpret_cast<uint4*>(q_rope + rr * d_r + 8 * (j - nvc)) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
  if (lane == 0) q_scale[r] = s;
}

__global__ void fp8_query_kernel(const uint16_t* q, int rows, int d_c, int d_r, uint8_t* q8, uint16_t* q_rope,
                                 float* q_scale) {
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const size_t rr = static_cast<size_t>(r);
  encode_row(
      q + rr * (d_c + d_r), d_c, d_r, lane, [&](int c, uint8_t v) { q8[rr * d_c + c] = v; },
      [&](int c, uint16_t v) { q_rope[rr * d_r + c] = v; }, [&](float s) { q_scale[r] = s; });
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
  // The vector kernel needs 16-byte aligned rows (d_c, d_r multiples of 8; the buffers' bases)
  // and at most kMaxVec vectors per lane.
  const bool aligned = reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(q8) % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(q_rope) % 16 == 0;
  if (aligned && d_c % 8 == 0 && d_r % 8 == 0 && d_c + d_r <= 8 * 32 * kMaxVec)
    fp8_query_vec_kernel<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(q, rows, d_c, d_r, q8, q_rope, q_scale);
  else
    fp8_query_kernel<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(q, rows, d_c, d_r, q8, q_rope, q_scale);
  cuda::check(cudaGetLastError(), "fp8 query quantisation launch");
}

}  // namespace mla::kernels
