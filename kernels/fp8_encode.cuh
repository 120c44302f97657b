#pragma once
// The FP8 row encoders of the cache append and the query quantisation (kernels/fp8_append.cu,
// and the FP8 decode's prologue in kernels/fp8_decode.cu): one warp per row, the twin's
// arithmetic (quant/fp8_cache_format.cpp) operation for operation: |x| max (exact in any order),
// s = max(amax, 1e-12) / 448 and x / s as IEEE fp32 divisions, E4M3 with round to nearest even
// and saturation (cvt.rn.satfinite), BF16 round to nearest even.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "quant/fp8_cache_layout.hpp"

namespace mla::kernels::fp8enc {

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

// The query's rows when d_c and d_r are multiples of 8: the row is read once into registers as
// 16-byte vectors (at most kMaxVec per lane: d_c + d_r <= 8 * 32 * kMaxVec) and written as
// 8-byte (latent) and 16-byte (RoPE) vectors; encode_row's arithmetic (row_scale, latent_code,
// rope_bits), element for element.
constexpr int kMaxVec = 3;
// The row at src with the 32 lanes of a warp; the callbacks take latent vector j (bytes
// 8 j .. 8 j + 7, as a uint2), RoPE vector j (values 8 j .. 8 j + 7, bf16 bits, as a uint4) and
// the scale (lane 0).
template <class StoreX, class StoreR, class StoreS>
__device__ __forceinline__ void quantize_row_vec(const uint16_t* src_row, int d_c, int d_r, int lane, StoreX store_x,
                                                 StoreR store_r, StoreS store_s) {
  const int nv = (d_c + d_r) / 8, nvc = d_c / 8;
  const uint4* src = reinterpret_cast<const uint4*>(src_row);
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
      store_x(j, make_uint2(b[0], b[1]));
    } else {  // 8 RoPE values -> 8 BF16
      uint32_t o[4] = {0u, 0u, 0u, 0u};
      if (finite) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float x = bf16_bits_to_float(static_cast<uint16_t>(w[e >> 1] >> (16 * (e & 1))));
          o[e >> 1] |= static_cast<uint32_t>(rope_bits(x, s)) << (16 * (e & 1));
        }
      }
      store_r(j - nvc, make_uint4(o[0], o[1], o[2], o[3]));
    }
  }
  if (lane == 0) store_s(s);
}

// Query row r into the global buffers q8 [rows, d_c], q_rope [rows, d_r], q_scale [rows].
__device__ __forceinline__ void quantize_query_row_vec(const uint16_t* q, int r, int d_c, int d_r, uint8_t* q8,
                                                       uint16_t* q_rope, float* q_scale, int lane) {
  const size_t rr = static_cast<size_t>(r);
  quantize_row_vec(
      q + rr * (d_c + d_r), d_c, d_r, lane,
      [&](int j, uint2 b) { *reinterpret_cast<uint2*>(q8 + rr * d_c + 8 * j) = b; },
      [&](int j, uint4 o) { *reinterpret_cast<uint4*>(q_rope + rr * d_r + 8 * j) = o; },
      [&](float s) { q_scale[r] = s; });
}

// The query's row r (any d_c, d_r, alignment): encode_row element by element.
__device__ __forceinline__ void quantize_query_row(const uint16_t* q, int r, int d_c, int d_r, uint8_t* q8,
                                                   uint16_t* q_rope, float* q_scale, int lane) {
  const size_t rr = static_cast<size_t>(r);
  encode_row(
      q + rr * (d_c + d_r), d_c, d_r, lane, [&](int c, uint8_t v) { q8[rr * d_c + c] = v; },
      [&](int c, uint16_t v) { q_rope[rr * d_r + c] = v; }, [&](float s) { q_scale[r] = s; });
}

// Row r by quantize_query_row_vec where it may (vec = query_vec_ok(...), decided once on the
// host), else by quantize_query_row: the same bytes either way.
__device__ __forceinline__ void quantize_query_row_any(bool vec, const uint16_t* q, int r, int d_c, int d_r,
                                                       uint8_t* q8, uint16_t* q_rope, float* q_scale, int lane) {
  if (vec) quantize_query_row_vec(q, r, d_c, d_r, q8, q_rope, q_scale, lane);
  else quantize_query_row(q, r, d_c, d_r, q8, q_rope, q_scale, lane);
}

// Whether quantize_query_row_vec takes these rows: 16-byte aligned rows and buffers (d_c, d_r
// multiples of 8) and at most kMaxVec vectors per lane.
inline bool query_vec_ok(const void* q, const void* q8, const void* q_rope, int d_c, int d_r) {
  return reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(q8) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(q_rope) % 16 == 0 && d_c % 8 == 0 && d_r % 8 == 0 &&
         d_c + d_r <= 8 * 32 * kMaxVec;
}

}  // namespace mla::kernels::fp8enc
