#pragma once
// Device pieces shared by the FP8 split kernels (kernels/fp8_decode_rows64.cu: 64-row blocks;
// kernels/fp8_decode_narrow.cu: <= 32 rows, transposed S; kernels/fp8_decode_pair.cu: the TPLA
// slices' 128-row blocks): descriptors, byte packing, the producer's bulk-copy loop over a CTA's
// tiles, the query's load into shared memory, the P.V warpgroups' transposed product
// O^T = V8^T P8^T (narrow and 64-row), and the launch switch over d_r and the cache format.
#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_store.cuh"
#include "kernels/fp8_encode.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/wgmma_ops.cuh"
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

// The stage ring's mbarriers (full[s] at bar0 + 8 s: the producer's expect_tx, or one arrive from
// each of `fillers` warps; empty[s] at bar0 + 8 (S + s): one arrive from each of `releasers`
// consumer warps), initialised by thread 0 and visible to the whole CTA on return.
__device__ __forceinline__ void init_stage_ring(uint32_t bar0, int stages, int releasers, int fillers = 1) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      detail::mbar_init(bar0 + 8 * s, fillers);
      detail::mbar_init(bar0 + 8 * (stages + s), releasers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}

// Byte address of 16-byte chunk k of query row r in the shared q8 of R rows: DC / 128 column
// blocks of R x 128 B, 128-byte swizzle (the wgmma K-major layout).
template <int R>
__device__ __forceinline__ uint32_t q8_chunk(uint32_t sQ8, int r, int k) {
  return sQ8 + (k >> 3) * (R * 128) + r * 128 + (((k & 7) ^ (r & 7)) << 4);
}

// Query rows [row0, row0 + R) of request b (zeros past `rows`) into shared memory in the
// K-major swizzled layouts wgmma reads: q8 as DC / 128 column blocks of R x 128 B (128-byte
// swizzle), q_rope as R rows of 2 DR bytes (128- or 64-byte swizzle). Threads t of n, by cp.async,
// not waited for: the issuing threads complete it with detail::cp_async_wait_all(), then
// detail::fence_proxy_async() and a barrier, so a segment's query can be loaded while the
// warpgroup that reads it finishes the segment before (the 64-row kernel).
template <int DC, int DR, int R>
__device__ __forceinline__ void issue_query(const quant::Fp8DecodeParams& p, int b, int rows, int row0, uint32_t sQ8,
                                            uint32_t sQR, int t, int n) {
  constexpr int kRB = 2 * DR;
  const uint8_t* q8 = p.q8 + static_cast<size_t>(b) * rows * DC;
  for (int c = t; c < R * (DC / 16); c += n) {
    const int r = c / (DC / 16), k = c % (DC / 16);
    const bool in = row0 + r < rows;
    detail::cp_async_16(q8_chunk<R>(sQ8, r, k), in ? q8 + static_cast<size_t>(row0 + r) * DC + k * 16 : q8, in);
  }
  const uint8_t* qr = reinterpret_cast<const uint8_t*>(p.q_rope) + static_cast<size_t>(b) * rows * kRB;
  for (int c = t; c < R * (kRB / 16); c += n) {
    const int r = c / (kRB / 16), k = c % (kRB / 16);
    const bool in = row0 + r < rows;
    detail::cp_async_16(sQR + quant::fp8_swizzle(r * kRB + k * 16, kRB),
                        in ? qr + static_cast<size_t>(row0 + r) * kRB + k * 16 : qr, in);
  }
}
// The same, completed for this thread (the caller's barrier publishes it to the others).
template <int DC, int DR, int R>
__device__ __forceinline__ void load_query(const quant::Fp8DecodeParams& p, int b, int rows, int row0, uint32_t sQ8,
                                           uint32_t sQR, int t, int n) {
  issue_query<DC, DR, R>(p, b, rows, row0, sQ8, sQR, t, n);
  detail::cp_async_wait_all();
  detail::fence_proxy_async();
}

// A bf16 query the split kernel quantises itself (fp8_decode_bf16q with a 16-byte aligned query:
// fp8enc::query_vec_ok): bf16 [batch, s_q, heads, d_c + d_r]; q8 / q_rope / q_scale: the
// workspace copy that the first split of each request also writes (the bytes the prologue
// launch wrote before: fp8_decode_query_offsets). bf16 == nullptr: the query is p's FP8 one.
struct QuerySrc {
  const uint16_t* bf16 = nullptr;
  uint8_t* q8 = nullptr;
  uint16_t* q_rope = nullptr;
  float* q_scale = nullptr;
};

// load_query's shared-memory result, quantised from q.bf16 (fp8enc::quantize_row_vec: the same
// bytes as the prologue's quantisation and the twin's), plus the rows' scales into sQs [R]
// (0 past `rows`). Warps `warp` of `warps`, one row each in turn; with to_global the rows also
// go to q's workspace copy.
template <int DC, int DR, int R>
__device__ __forceinline__ void quantize_query_smem(const QuerySrc& q, int b, int rows, uint32_t sQ8, uint32_t sQR,
                                                    float* sQs, int warp, int warps, int lane, bool to_global) {
  constexpr int kRB = 2 * DR;
  for (int r = warp; r < R; r += warps) {
    if (r >= rows) {  // zeros, as load_query
      for (int k = lane; k < DC / 16; k += 32)
        detail::st_shared_v4(q8_chunk<R>(sQ8, r, k), make_uint4(0u, 0u, 0u, 0u));
      for (int k = lane; k < kRB / 16; k += 32)
        detail::st_shared_v4(sQR + quant::fp8_swizzle(r * kRB + k * 16, kRB), make_uint4(0u, 0u, 0u, 0u));
      if (lane == 0) sQs[r] = 0.f;
      continue;
    }
    const size_t g = static_cast<size_t>(b) * rows + r;
    fp8enc::quantize_row_vec(
        q.bf16 + g * (DC + DR), DC, DR, lane,
        [&](int j, uint2 v) {
          const uint32_t a = q8_chunk<R>(sQ8, r, j >> 1) + 8 * (j & 1);  // 8-byte half of chunk j / 2
          asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(a), "r"(v.x), "r"(v.y) : "memory");
          if (to_global) *reinterpret_cast<uint2*>(q.q8 + g * DC + 8 * j) = v;
        },
        [&](int j, uint4 v) {
          detail::st_shared_v4(sQR + quant::fp8_swizzle(r * kRB + j * 16, kRB), v);
          if (to_global) *reinterpret_cast<uint4*>(q.q_rope + g * DR + 8 * j) = v;
        },
        [&](float s) {
          sQs[r] = s;
          if (to_global) q.q_scale[g] = s;
        });
  }
  detail::fence_proxy_async();
}

// ---- The P.V warpgroups of the transposed product O^T [d_c x N] += V8^T P8^T (the narrow
// kernel, kernels/fp8_decode_narrow.cu, N = 16/32, and the 64-row kernel,
// kernels/fp8_decode_rows64.cu, N = 64, and the pair kernel): A = V^T built in registers from the
// tile with ldmatrix.trans (NB m-blocks of 16-channel groups a thread), B = P^T (N rows of 64
// token bytes in p8t_k order, 128-byte rows and swizzle). ----

// Accumulator element (row m, column n) of an m64nN wgmma: thread (warp w, g, tq) holds
// m = 16 w + g + 8 h, n = 8 j + 2 tq + e in register 4 j + 2 h + e. Its N / 4 columns c:
__device__ __forceinline__ int acc_col(int c, int tq) { return 8 * (c >> 1) + 2 * tq + (c & 1); }
__host__ __device__ constexpr int acc_reg(int c, int h) { return 4 * (c >> 1) + 2 * h + (c & 1); }

// V^T A fragments through ldmatrix.trans (the 64-row and pair kernels). The stage's latent rows
// are tokens of 128-byte swizzled blocks; read as 8x8 matrices of b16 (channel pairs), .trans
// gives lane (g, tq) channels 2 g, 2 g + 1 of two consecutive tokens per register, and one byte
// permute per fragment register sorts them into a channel's four tokens (no 4x4 transposes).
// Channel groups of 16: m-block mb of warp wiw holds group G = g0 + 4 mb + wiw, accumulator row
// (mb, 16 wiw + g + 8 h) is channel 16 G + 2 g + h (vt_ldsm_channel). The k order inside each
// 16-token half is p8t_k's: k = 4 a + 2 m + e holds token 8 m + 2 a + e, so P^T is stored in that
// order (store_p8t). Tokens >= valid read as 0 (their bytes may be NaN).
__host__ __device__ constexpr int p8t_k(int tok) {
  return (tok & ~15) | (((tok >> 1) & 3) << 2) | (((tok >> 3) & 1) << 1) | (tok & 1);
}
__device__ __forceinline__ int vt_ldsm_channel(int g0, int mb, int wiw, int g, int h) {
  return 16 * (g0 + 4 * mb + wiw) + 2 * g + h;
}
template <int NB>
__device__ __forceinline__ void vt_fragments_ldsm(uint32_t st, int g0, int wiw, int lane, int tq, int valid, int ks,
                                                  uint32_t (&fr)[NB][4]) {
  const int r = lane & 7;
  const uint32_t row = st + static_cast<uint32_t>(32 * ks + 8 * (lane >> 3) + r) * 128;
  const int t0 = 32 * ks + 2 * tq;  // fragment bytes: tokens t0, t0 + 1, t0 + 8, t0 + 9 (+ 16 in half 1)
  auto mask = [&](int t) {
    return (t < valid ? 0xFFu : 0u) | (t + 1 < valid ? 0xFF00u : 0u) | (t + 8 < valid ? 0xFF0000u : 0u) |
           (t + 9 < valid ? 0xFF000000u : 0u);
  };
  const uint32_t mk0 = mask(t0), mk1 = mask(t0 + 16);
  // Group G = x + 4 mb (x = g0 + wiw) sits in 128-channel block G >> 3 at swizzled chunk
  // (G & 7) ^ r, and (x + 4 mb) & 7 = (x & 7) ^ 4 (mb & 1): two base addresses (even and odd mb)
  // and constant block offsets, so no per-block address stays live across the tile loop.
  const int x = g0 + wiw, hx = (x >> 2) & 1;
  const uint32_t base_e = row + static_cast<uint32_t>(x >> 3) * 8192 + ((static_cast<uint32_t>(x & 7) ^ r) << 4);
  const uint32_t base_o = (base_e ^ 64u) + static_cast<uint32_t>(hx) * 8192;
#pragma unroll
  for (int mb = 0; mb < NB; ++mb) {
    const uint32_t a = ((mb & 1) ? base_o : base_e) + static_cast<uint32_t>(mb >> 1) * 8192;
    uint32_t x0, x1, x2, x3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                 : "r"(a));
    fr[mb][0] = __byte_perm(x0, x1, 0x6420) & mk0;
    fr[mb][1] = __byte_perm(x0, x1, 0x7531) & mk0;
    fr[mb][2] = __byte_perm(x2, x3, 0x6420) & mk1;
    fr[mb][3] = __byte_perm(x2, x3, 0x7531) & mk1;
  }
}

// O^T *= gamma: gam holds the tile's N row factors (the accumulator's columns), by row, or with
// kByThread each thread's N / 4 in a row of their own (gam[N / 4 tq + c]: vector loads).
template <int NB, int N, bool kByThread = false>
__device__ __forceinline__ void pv_rescale(float (&acc)[NB][N / 2], const float* gam, int tq) {
  // One row factor at a time: at N = 64 the accumulators and fragments leave few registers.
#pragma unroll
  for (int c = 0; c < N / 4; ++c) {
    const float gm = kByThread ? gam[(N / 4) * tq + c] : gam[acc_col(c, tq)];
#pragma unroll
    for (int mb = 0; mb < NB; ++mb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        acc[mb][acc_reg(c, h)] *= gm;
        gmma::fence_operand(acc[mb][acc_reg(c, h)]);
      }
  }
}

// Issues O^T += V8^T P8^T for one k-step (32 tokens): fr from vt_fragments_ldsm, desc_p the P^T
// buffer's descriptor at that k-step. The caller fences, commits and waits.
template <int NB, int N>
__device__ __forceinline__ void pv_mma_ks(float (&acc)[NB][N / 2], const uint32_t (&fr)[NB][4], uint64_t desc_p) {
#pragma unroll
  for (int mb = 0; mb < NB; ++mb) {
    if constexpr (N == 64) rs_e4m3_n64(acc[mb], fr[mb], desc_p);
    else rs_e4m3_narrow<N>(acc[mb], fr[mb], desc_p);
  }
}

template <int NB, int N>
__device__ __forceinline__ void pv_fence_acc(float (&acc)[NB][N / 2]) {
#pragma unroll
  for (int mb = 0; mb < NB; ++mb)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) gmma::fence_operand(acc[mb][i]);
}

// The end of a split for a P.V thread: rows row0 + n of its N / 4 accumulator columns n (below
// `rows`), vt_fragments_ldsm's channels (16 G + 2 g + h, G = g0 + 4 mb + wiw: two per m-block),
// scaled by fin[2 n] = 1 / l; bf16 into out when the request has one split, else fp32 into its
// split's partial; with_lse threads also write the rows' LSE (fin[2 n + 1]).
template <int DC, int NB, int N>
__device__ __forceinline__ void store_pv_rows(const quant::Fp8DecodeParams& p, float* o_acc, float* lse_acc, int b,
                                              int split, int n_split, int rows, int row0, int g0, int wiw, int g,
                                              const float (&acc)[NB][N / 2], const float* fin, int tq,
                                              bool with_lse) {
#pragma unroll
  for (int c = 0; c < N / 4; ++c) {
    const int n = acc_col(c, tq), r = row0 + n;
    if (r >= rows) continue;
    const float inv = fin[2 * n], lse = fin[2 * n + 1];
#pragma unroll
    for (int mb = 0; mb < NB; ++mb) {
      const int ch = vt_ldsm_channel(g0, mb, wiw, g, 0);
      const float v0 = acc[mb][acc_reg(c, 0)] * inv, v1 = acc[mb][acc_reg(c, 1)] * inv;
      if (n_split == 1)
        *reinterpret_cast<uint32_t*>(p.out + (static_cast<size_t>(b) * rows + r) * DC + ch) = detail::pack_bf16(v0, v1);
      else
        *reinterpret_cast<float2*>(o_acc + (static_cast<size_t>(split) * rows + r) * DC + ch) = make_float2(v0, v1);
    }
    if (with_lse) {
      if (n_split == 1) p.lse[static_cast<size_t>(b) * rows + r] = lse;
      else lse_acc[static_cast<size_t>(split) * rows + r] = lse;
    }
  }
}

// Calls f(dr, fp4) with the RoPE width (32 or 64) and the cache format (FP4 pages or FP8) as
// std::integral_constant values: the split kernels' launch switch onto their instantiations.
template <class F>
void with_dr_and_format(int d_r, bool fp4_cache, F&& f) {
  using std::integral_constant;
  if (fp4_cache) {
    if (d_r == 64) f(integral_constant<int, 64>{}, std::true_type{});
    else f(integral_constant<int, 32>{}, std::true_type{});
  } else {
    if (d_r == 64) f(integral_constant<int, 64>{}, std::false_type{});
    else f(integral_constant<int, 32>{}, std::false_type{});
  }
}

// The 64-row kernel's launch (kernels/fp8_decode_rows64.cu): rows = s_q heads > kNarrowRows.
// fp4_cache: p.cache holds FP4 pages, converted per tile (as for the narrow kernel).
void launch_rows64(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream,
                   bool fp4_cache = false);

// The TPLA-slice kernel's launch (kernels/fp8_decode_pair.cu): d_c <= 256 and rows > 64
// (quant::fp8_decode_uses_pair), 128-row blocks.
void launch_pair(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream);

// The narrow kernel's launch (kernels/fp8_decode_narrow.cu): rows = s_q heads <= kNarrowRows.
// fp4_cache: p.cache holds FP4 pages (quant/fp4_cache_layout.hpp), converted per tile. x: the
// bf16 query it quantises itself (x.query.bf16, else p's FP8 query) and the merge counters
// ([batch], zero: the kernel merges each request's splits itself; no combine launch follows).
constexpr int kNarrowRows = 32;
struct NarrowExtras {
  QuerySrc query;
  int32_t* merge_cnt = nullptr;
};
void launch_narrow(const quant::Fp8DecodeParams& p, const NarrowExtras& x, const detail::Workspace& w, int parts,
                   cudaStream_t stream, bool fp4_cache = false);

}  // namespace mla::kernels::fp8
