#pragma once
// Device pieces shared by the two FP8 split kernels (kernels/fp8_decode.cu: 64-row blocks;
// kernels/fp8_decode_narrow.cu: <= 32 rows, transposed products): descriptors, byte packing, the
// producer's bulk-copy loop over a CTA's tiles and the query's load into shared memory.
#include <cuda_fp8.h>

#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "quant/fp8_decode_twin.hpp"

namespace mla::kernels::fp8 {

constexpr int kT = quant::kFp8DecodeTile;

// Shared-memory matrix descriptor with swizzle mode `mode` (1: 128 B, 2: 64 B).
__device__ __forceinline__ uint64_t desc_sw(uint32_t saddr, uint32_t sbo, int mode) {
  uint64_t d = static_cast<uint64_t>((saddr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;
  d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(mode) << 62;
  return d;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.b16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void sts8(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b8 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// Four floats to four E4M3 bytes (a lowest), round to nearest even, saturating.
__device__ __forceinline__ uint32_t pack_e4m3(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}
// 4x4 byte transpose: in[e] holds bytes (e, 0..3) of a 4x4 block, out[q] bytes (0..3, q).
__device__ __forceinline__ void transpose4x4(const uint32_t (&v)[4], uint32_t (&o)[4]) {
  const uint32_t lo01 = __byte_perm(v[0], v[1], 0x5140), hi01 = __byte_perm(v[0], v[1], 0x7362);
  const uint32_t lo23 = __byte_perm(v[2], v[3], 0x5140), hi23 = __byte_perm(v[2], v[3], 0x7362);
  o[0] = __byte_perm(lo01, lo23, 0x5410);
  o[1] = __byte_perm(lo01, lo23, 0x7632);
  o[2] = __byte_perm(hi01, hi23, 0x5410);
  o[3] = __byte_perm(hi01, hi23, 0x7632);
}

// Bytes of one stage: the tile's latent column blocks (64 x 128 B each), its RoPE rows and its
// 64 scales, as they land from the page (pre-swizzled).
template <int DC, int DR>
struct StageBytes {
  static constexpr int kRB = 2 * DR;  // rope row bytes (64 or 128)
  static constexpr uint32_t kData = 64 * (DC + kRB) + 256;
  static constexpr uint32_t kAligned = (kData + 1023) / 1024 * 1024;
};

// The producer (one thread): walks the CTA's tiles (the scheduler's part `in`), waits for the
// ring stage to be released (empty[s] at bar0 + 8 (S + s)), then issues the stage's bulk copies
// completing on full[s] (bar0 + 8 s). A tile without a valid page (past the table, a sentinel or
// an out-of-range id) arrives without data; an out-of-range id inside a request raises the flag.
// With sValid != 0 the tile's valid token count (0 without a page) is stored at sValid + 4 s
// before the arrival, so the consumers need no page-table read of their own.
template <int DC, int DR, int S>
__device__ __forceinline__ void produce_tiles(const quant::Fp8DecodeParams& p, const int32_t* in, uint32_t sSt,
                                              uint32_t bar0, uint32_t sValid = 0) {
  using SB = StageBytes<DC, DR>;
  const quant::Fp8CacheLayout lay = p.layout();
  const size_t page_bytes = lay.page_bytes();
  const int end_b = in[2], end_t = in[3];
  int it = 0;
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
    const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;
    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S;
      const int j0 = ti * kT;
      const int slot = j0 / p.page_size;
      const int page = (j0 < L && slot < p.max_pages) ? ptab[slot] : -1;
      const bool ok = page >= 0 && page < p.num_pages;
      if (!ok && j0 < L && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
      detail::mbar_wait(bar0 + 8 * (S + stage), ((it / S) & 1) ^ 1);
      const uint32_t full = bar0 + 8 * stage;
      if (sValid != 0) sts32(sValid + 4 * stage, ok ? static_cast<uint32_t>(min(kT, L - j0)) : 0u);
      if (!ok) {
        detail::mbar_arrive(full);
        continue;
      }
      detail::mbar_arrive_expect_tx(full, SB::kData);
      const uint8_t* src = p.cache + static_cast<size_t>(page) * page_bytes;
      const int off = j0 % p.page_size;
      const uint32_t dst = sSt + stage * SB::kAligned;
      for (int kb = 0; kb < DC / 128; ++kb)
        detail::bulk_g2s(dst + kb * 8192, src + static_cast<size_t>(kb) * p.page_size * 128 + off * 128, 8192, full);
      detail::bulk_g2s(dst + 64 * DC, src + lay.rope_offset() + off * SB::kRB, 64 * SB::kRB, full);
      detail::bulk_g2s(dst + 64 * (DC + SB::kRB), src + lay.scale_offset() + off * 4, 256, full);
    }
  }
}

// Query rows [row0, row0 + R) of request b (zeros past `rows`) into shared memory in the
// K-major swizzled layouts wgmma reads: q8 as DC / 128 column blocks of R x 128 B (128-byte
// swizzle), q_rope as R rows of 2 DR bytes (128- or 64-byte swizzle). Threads t of n.
template <int DC, int DR, int R>
__device__ __forceinline__ void load_query(const quant::Fp8DecodeParams& p, int b, int rows, int row0, uint32_t sQ8,
                                           uint32_t sQR, int t, int n) {
  constexpr int kRB = 2 * DR;
  const uint8_t* q8 = p.q8 + static_cast<size_t>(b) * rows * DC;
  for (int c = t; c < R * (DC / 16); c += n) {
    const int r = c / (DC / 16), k = c % (DC / 16);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(q8 + static_cast<size_t>(row0 + r) * DC + k * 16);
    detail::st_shared_v4(sQ8 + (k >> 3) * (R * 128) + r * 128 + (((k & 7) ^ (r & 7)) << 4), v);
  }
  const uint8_t* qr = reinterpret_cast<const uint8_t*>(p.q_rope) + static_cast<size_t>(b) * rows * kRB;
  for (int c = t; c < R * (kRB / 16); c += n) {
    const int r = c / (kRB / 16), k = c % (kRB / 16);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(qr + static_cast<size_t>(row0 + r) * kRB + k * 16);
    detail::st_shared_v4(sQR + quant::fp8_swizzle(r * kRB + k * 16, kRB), v);
  }
  detail::fence_proxy_async();
}

// The narrow kernel's launch (kernels/fp8_decode_narrow.cu): rows = s_q heads <= kNarrowRows.
// fp4_cache: p.cache holds FP4 pages (quant/fp4_cache_layout.hpp), converted per tile.
constexpr int kNarrowRows = 32;
void launch_narrow(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream,
                   bool fp4_cache = false);

}  // namespace mla::kernels::fp8
