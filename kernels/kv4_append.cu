// 4-bit cache append (kv4_append.hpp): one warp per token row. The arithmetic is the twins'
// (quant/fp4_kv.cpp, quant/fp4_cache_format.cpp, quant/codebook_cache_format.cpp) operation for
// operation, so every byte matches:
//   FP4: per group of 32, amax (exact in any order); the UE8M0 byte from frexpf(c * amax) with the
//        mantissa compared to 2^-1/2 in double; codes = E2M1(ldexpf(x, -E)) with round to nearest
//        even, saturating at 6, sign kept for values that round to zero (code 8).
//   codebook: s = sqrtf(sum / d_c) with the sum in the twin's fixed order (lane l: fmaf over
//        i = l, l + 32, ...; then the xor butterfly 16, 8, 4, 2, 1); index = the number of
//        thresholds 0.5f (level_k + level_k+1) below x / s (IEEE division).
#include "kernels/kv4_append.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "quant/fp4_cache_layout.hpp"
#include "quant/fp8_cache_layout.hpp"

namespace mla::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// E2M1 code of v (round to nearest even on the grid 0, .5, 1, 1.5, 2, 3, 4, 6; saturating).
__device__ __forceinline__ uint32_t e2m1_code(float v) {
  const float a = fabsf(v);
  uint32_t c = a <= 0.25f ? 0u : a < 0.75f ? 1u : a <= 1.25f ? 2u : a < 1.75f ? 3u : a <= 2.5f ? 4u : a < 3.5f ? 5u : a <= 5.f ? 6u : 7u;
  if (isnan(v)) c = 7u;  // the twin's NaN code (not reached: such tokens are poisoned)
  return c | (signbit(v) ? 8u : 0u);
}

// UE8M0 byte of the Round rule (quant/fp4_kv.cpp fp4_scale_byte).
__device__ __forceinline__ uint32_t fp4_scale_byte(float amax, float c) {
  if (!(amax > 0.f) || !isfinite(amax)) return 0u;
  int e = 0;
  const float f = frexpf(c * amax, &e);
  int ex = static_cast<double>(f) >= 0.70710678118654752440 ? e : e - 1;
  ex = max(-127, min(127, ex));
  return static_cast<uint32_t>(ex + 127);
}

// Token i of request b (one warp): the page and slot, or nullptr (bad position / page id, flagged).
__device__ uint8_t* token_page(const Kv4AppendParams& p, size_t page_bytes, int i, int b, int lane, int* slot) {
  const long long pos = static_cast<long long>(p.positions[b]) + i;
  const long long pg_slot = pos / p.page_size;
  int page = -1;
  if (pos >= 0 && pg_slot < p.max_pages) page = p.page_table[static_cast<size_t>(b) * p.max_pages + pg_slot];
  if (page < 0 || page >= p.num_pages) {
    if (lane == 0 && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
    return nullptr;
  }
  *slot = static_cast<int>(pos % p.page_size);
  return p.cache + static_cast<size_t>(page) * page_bytes;
}

__global__ void kv4_append_kernel(const Kv4AppendParams p) {
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (i >= p.n_new) return;
  const bool fp4 = p.format == Kv4Format::Fp4;
  const quant::Fp4CacheLayout lf{p.page_size, p.d_c, p.d_r};
  const quant::CodebookCacheLayout lc{p.page_size, p.d_c, p.d_r};
  const size_t page_bytes = fp4 ? lf.page_bytes() : lc.page_bytes();
  const int groups = p.d_c / 32;
  for (int b = blockIdx.y; b < p.batch; b += gridDim.y) {
    int t = 0;
    uint8_t* page = token_page(p, page_bytes, i, b, lane, &t);
    if (page == nullptr) continue;
    const uint16_t* src = p.kv_new + (static_cast<size_t>(b) * p.n_new + i) * (p.d_c + p.d_r);
    bool finite = true;
    for (int k = lane; k < p.d_c + p.d_r; k += 32) finite = finite && isfinite(bf16_bits_to_float(src[k]));
    finite = __all_sync(0xffffffffu, finite);
    float s = 0.f;
    if (!fp4 && finite) {  // the token scale, in the twin's order
      float acc = 0.f;
      for (int k = lane; k < p.d_c; k += 32) {
        const float x = bf16_bits_to_float(src[k]);
        acc = fmaf(x, x, acc);
      }
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      s = sqrtf(__fdiv_rn(acc, static_cast<float>(p.d_c)));
      finite = isfinite(s);
    }
    // Latent: lane l encodes groups l, l + 32, ... (32 values -> 16 code bytes, one 16-byte chunk).
    for (int g = lane; g < groups; g += 32) {
      uint32_t w[4] = {0u, 0u, 0u, 0u};
      uint32_t sb = quant::kFp4PoisonScale;
      if (finite) {
        float x[32];
        for (int k = 0; k < 32; ++k) x[k] = bf16_bits_to_float(src[32 * g + k]);
        if (fp4) {
          float amax = 0.f;
          for (int k = 0; k < 32; ++k) amax = fmaxf(amax, fabsf(x[k]));
          sb = fp4_scale_byte(amax, p.c);
          if (sb != 0u) {
            const int e = static_cast<int>(sb) - 127;
            for (int k = 0; k < 32; ++k) w[k / 8] |= e2m1_code(ldexpf(x[k], -e)) << (4 * (k % 8));
          }
        } else {
          for (int k = 0; k < 32; ++k) {
            const float v = s > 0.f ? __fdiv_rn(x[k], s) : 0.f;
            uint32_t idx = 0;
            for (int j = 0; j + 1 < 16; ++j) idx = v > 0.5f * (p.levels[j] + p.levels[j + 1]) ? j + 1 : idx;
            w[k / 8] |= idx << (4 * (k % 8));
          }
        }
      }
      const size_t cb = fp4 ? lf.code_byte(t, 16 * g) : lc.code_byte(t, 16 * g);
      *reinterpret_cast<uint4*>(page + cb) = make_uint4(w[0], w[1], w[2], w[3]);
      if (fp4) page[lf.scale_byte(t, g)] = static_cast<uint8_t>(sb);
    }
    if (!fp4 && lane == 0)
      *reinterpret_cast<float*>(page + lc.scale_byte(t)) = finite ? s : __uint_as_float(quant::kFp8PoisonScaleBits);
    for (int k = lane; k < p.d_r; k += 32) {
      const uint16_t r = finite ? src[p.d_c + k] : uint16_t{0};
      *reinterpret_cast<uint16_t*>(page + (fp4 ? lf.rope_byte(t, k) : lc.rope_byte(t, k))) = r;
    }
  }
}

}  // namespace

void kv4_cache_append(const Kv4AppendParams& p, cudaStream_t stream) {
  auto bad = [](const std::string& what) { throw InputError("4-bit cache append params: " + what); };
  if (!p.kv_new || !p.positions || !p.page_table || !p.cache) bad("a pointer is null");
  if (p.batch < 1) bad("batch = " + std::to_string(p.batch) + " (must be >= 1)");
  if (p.n_new < 1) bad("n_new = " + std::to_string(p.n_new) + " (must be >= 1)");
  if (p.max_pages < 1) bad("max_pages = " + std::to_string(p.max_pages));
  if (p.num_pages < 1) bad("num_pages = " + std::to_string(p.num_pages));
  if (p.page_size < 1) bad("page_size = " + std::to_string(p.page_size));
  if (!(p.d_c >= 32 && p.d_c <= 4096 && (p.d_c & (p.d_c - 1)) == 0))
    bad("d_c = " + std::to_string(p.d_c) + " (must be a power of two from 32 to 4096)");
  const int rb = 2 * p.d_r;
  if (!(rb == 16 || rb == 32 || rb == 64 || (rb > 0 && rb % 128 == 0)))
    bad("d_r = " + std::to_string(p.d_r) + " (supported: 8, 16, 32 or a multiple of 64)");
  if (p.format == Kv4Format::Fp4 && !(std::isfinite(p.c) && p.c > 0.f))
    bad("c = " + std::to_string(p.c) + " (must be finite and > 0)");
  if (p.format == Kv4Format::Codebook)
    for (int k = 0; k < 16; ++k)
      if (!std::isfinite(p.levels[k]) || (k > 0 && !(p.levels[k] > p.levels[k - 1])))
        bad("codebook level " + std::to_string(k) + " = " + std::to_string(p.levels[k]) +
            " (16 finite, strictly ascending levels needed)");
  const dim3 grid((p.n_new + kWarpsPerBlock - 1) / kWarpsPerBlock, p.batch < 65535 ? p.batch : 65535);
  kv4_append_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(p);
  cuda::check(cudaGetLastError(), "4-bit cache append launch");
}

}  // namespace mla::kernels
