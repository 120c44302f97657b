#pragma once
// The softmax side of the FP8 64-row split kernel (kernels/fp8_decode_rows64.cu, warpgroup 0):
// S [64 rows x 64 tokens] in a wgmma m64n64 accumulator, each
// thread holding rows 16 wiw + g + 8 h (h = 0, 1) at tokens 8 n + 2 tq + e in register
// 4 n + 2 h + e. The online softmax of one tile, P8^T into its shared-memory buffer, the rows'
// factors in the P.V threads' order, and the end of a segment's rows (1/l, LSE).
#include <cuda_fp8.h>

#include "kernels/decode_device.cuh"
#include "kernels/decode_softmax.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/wgmma_ops.cuh"
#include "quant/fp8_decode_twin.hpp"

namespace mla::kernels::fp8 {

// Where warpgroup 0 stores row r's factor gamma: each P.V thread (tq) reads the 16 rows of its
// accumulator columns (8 j + 2 tq + e, c = 2 j + e) as 16 consecutive floats at 16 tq + c.
__device__ __forceinline__ int gam_index(int r) { return ((r >> 1) & 3) * 16 + (r >> 3) * 2 + (r & 1); }

// One tile's online softmax for warpgroup 0's thread: rows h = 0, 1 (16 wiw + g + 8 h), tokens
// j0 + 8 n + 2 tq + e in sv[4 n + 2 h + e]; skv[2 n + e] their s_k. S in, P (exp2(x - m) s_k,
// unscaled) out; the running max, sum and sigma updated, gamma and 1 / sigma of the tile out.
// kMasked: keys at or past lim[h] are masked (the boundary tiles); interior tiles skip the tests.
template <bool kMasked>
__device__ __forceinline__ void softmax_tile_rows64(float (&sv)[32], const float (&skv)[16], const int (&lim)[2],
                                                    int j0, int tq, const float (&rowf)[2], float (&m_run)[2],
                                                    float (&l_run)[2], float (&sig)[2], float (&gamma)[2],
                                                    float (&inv)[2]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float tmax[2] = {neg_inf, neg_inf};
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int h = (i >> 1) & 1, e = (i >> 2) * 2 + (i & 1), jj = (i >> 2) * 8 + 2 * tq + (i & 1);
    const float x = (sv[i] * skv[e]) * rowf[h];
    sv[i] = (!kMasked || j0 + jj < lim[h]) ? x : neg_inf;
    tmax[h] = fmaxf(tmax[h], sv[i]);
  }
  float m_use[2], alpha[2], psum[2] = {0.f, 0.f}, amax[2] = {0.f, 0.f};
  detail::row_max_step(tmax, m_run, m_use, alpha, [](float x) { return detail::ex2_ftz(x); });
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int h = (i >> 1) & 1, e = (i >> 2) * 2 + (i & 1), jj = (i >> 2) * 8 + 2 * tq + (i & 1);
    const bool live = !kMasked || j0 + jj < lim[h];
    const float pv = detail::ex2_ftz(sv[i] - m_use[h]);  // 0 where masked (sv = -inf); under `live`: a branch a key (PTX)
    psum[h] += pv;
    const float pp = live ? pv * skv[e] : 0.f;
    amax[h] = fmaxf(amax[h], pp);
    sv[i] = pp;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
    amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));
    const float sg = quant::fp8_block_scale(amax[h], sig[h]);
    inv[h] = 1.f / sg;
    gamma[h] = alpha[h] * (sig[h] * inv[h]);
    l_run[h] = l_run[h] * gamma[h] + psum[h] * inv[h];
    sig[h] = sg;
  }
}

// One tile's softmax, masked only where a row's limit falls inside the tile (interior tiles skip
// the tests; the same arithmetic either way).
__device__ __forceinline__ void softmax_tile_any(float (&sv)[32], const float (&skv)[16], const int (&lim)[2], int j0,
                                                 int tq, const float (&rowf)[2], float (&m_run)[2], float (&l_run)[2],
                                                 float (&sig)[2], float (&gamma)[2], float (&inv)[2]) {
  if (j0 + kT <= min(lim[0], lim[1]))
    softmax_tile_rows64<false>(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gamma, inv);
  else
    softmax_tile_rows64<true>(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gamma, inv);
}

// S [64 rows x 64 tokens] of the tile in stage st into acc: Q8 K8^T (e4m3, m64n64k32, the first
// k-step write-only) + Q_rope K_rope^T (bf16, m64n64k16); dq, dqr the query's descriptors.
// Issued and committed; the caller waits.
template <int DC, int DR>
__device__ __forceinline__ void issue_s_rows64(float (&acc)[32], uint64_t dq, uint64_t dqr, uint32_t st) {
  constexpr int kRB = 2 * DR;
  const uint64_t dt = desc_sw(st, 1024, 1), dtr = desc_sw(st + 64 * DC, 8 * kRB, kRB == 128 ? 1 : 2);
  gmma::fence();
  ss_e4m3_n64_first(acc, dq, dt);
#pragma unroll
  for (int kk = 1; kk < DC / 32; ++kk) {
    const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
    ss_e4m3_n64(acc, detail::gmma_desc_at(dq, off), detail::gmma_desc_at(dt, off));
  }
#pragma unroll
  for (int kk = 0; kk < DR / 16; ++kk)
    gmma::wgmma_ss_n64(acc, detail::gmma_desc_at(dqr, kk * 32), detail::gmma_desc_at(dtr, kk * 32));
  gmma::commit();
}

// s_k of the thread's 16 tokens (8 n + 2 tq + e) of the tile in stage st.
template <int DC, int DR>
__device__ __forceinline__ void load_skv(uint32_t st, int tq, float (&skv)[16]) {
  const uint32_t skp = st + 64 * (DC + 2 * DR);
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const uint2 k2 = lds64(skp + 4 * (8 * n + 2 * tq));
    skv[2 * n] = __uint_as_float(k2.x);
    skv[2 * n + 1] = __uint_as_float(k2.y);
  }
}

// The inputs of one tile's softmax for the thread's two rows, read from shared memory before the
// stage can be released: s_k of its 16 tokens (8 n + 2 tq + e) and each row's key limit (its
// causal end in the request or the tile's valid tokens, whichever comes first).
template <int DC, int DR>
__device__ __forceinline__ void softmax_inputs(uint32_t st, uint32_t valid_addr, int j0, int L,
                                               const int (&lim_off)[2], int tq, float (&skv)[16], int (&lim)[2]) {
  const int valid = static_cast<int>(lds32(valid_addr));
  load_skv<DC, DR>(st, tq, skv);
  lim[0] = min(L - lim_off[0], j0 + valid);
  lim[1] = min(L - lim_off[1], j0 + valid);
}

// P8^T [row][k] (128-byte rows and swizzle, 64 bytes used) of the thread's two rows at buffer
// pbuf, tokens in p8t_k's order (the V^T fragments' k order): P / sigma rounded to E4M3
// (saturating). The thread's four tokens of a row in a 16-token half (8 n + 2 tq + e, n = 2 half
// and 2 half + 1) are bytes 4 tq .. 4 tq + 3 of that half in p8t_k's order: one 32-bit store.
__device__ __forceinline__ void store_p8t(const float (&sv)[32], const float (&inv)[2], uint32_t pbuf,
                                          const int (&lrow)[2], int tq) {
#pragma unroll
  for (int half = 0; half < 4; ++half)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = lrow[h], n0 = 2 * half, n1 = 2 * half + 1;
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(sv[4 * n0 + 2 * h] * inv[h], sv[4 * n0 + 2 * h + 1] * inv[h]),
                                                   __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(sv[4 * n1 + 2 * h] * inv[h], sv[4 * n1 + 2 * h + 1] * inv[h]),
                                                   __NV_SATFINITE, __NV_E4M3);
      sts32(pbuf + r * 128 + ((half ^ (r & 7)) << 4) + 4 * tq, lo | (hi << 16));
    }
}

// P8^T into pbuf and the rows' gamma into gam in the P.V threads' order (gam_index).
__device__ __forceinline__ void store_p8t_gamma(const float (&sv)[32], const float (&inv)[2], const float (&gamma)[2],
                                                uint32_t pbuf, float* gam, const int (&lrow)[2], int tq) {
  store_p8t(sv, inv, pbuf, lrow, tq);
  if (tq == 0) {
    gam[gam_index(lrow[0])] = gamma[0];
    gam[gam_index(lrow[1])] = gamma[1];
  }
}

// The end of a segment for the thread's two rows: fin[2 r] = 1 / l, fin[2 r + 1] = the LSE
// (m + log2(sigma l)) ln 2; an empty row (l = 0) gets 0 and -inf.
__device__ __forceinline__ void write_fin(float* fin, const int (&lrow)[2], const float (&m_run)[2],
                                          const float (&l_run)[2], const float (&sig)[2], int tq) {
  const float neg_inf = -__int_as_float(0x7f800000);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_run[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (tq == 0) {
      const bool empty = l == 0.f;
      fin[2 * lrow[h]] = empty ? 0.f : 1.f / l;
      fin[2 * lrow[h] + 1] = empty ? neg_inf : (m_run[h] + log2f(sig[h] * l)) * detail::kLn2;
    }
  }
}

}  // namespace mla::kernels::fp8
