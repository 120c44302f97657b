#pragma once
// The many-head paths' per-tile math on the tensor cores: S = Q K^T for a 64-token tile, and the
// online softmax of a tile of S held in wgmma accumulators (the rounding points of the twin).
#include "kernels/decode_device.cuh"
#include "kernels/wgmma_ops.cuh"
#include "quant/decode_twin_bf16.hpp"

namespace mla::kernels::detail {

// S = Q K^T for one 64-token tile, issued as one commit group (not waited for): 64 query rows at
// sq, the tile's 64 keys at tile (both 128-byte-swizzled K-major blocks of 8 KB), nk k-steps of
// 16, wgmma m64n64k16. sv is in flight until the caller's wgmma.wait covers this group.
// The first k-step overwrites the accumulators (no zeroing instructions, which would make ptxas
// serialise the wgmma pipeline while another group of this warpgroup is in flight).
// NK > 0: nk known at compile time, the loop unrolled and every k-step's descriptors one add of
// an immediate. With nk at run time (NK = 0) ptxas rebuilds each descriptor through ~15
// instructions and a move to uniform registers, and the wgmmas issue slower than the tensor
// cores run them (ncu on v7, docs/gpu-notes.md).
template <int NK>
__device__ __forceinline__ void issue_s64(float (&sv)[32], uint32_t sq, uint32_t tile, int nk) {
  const uint64_t dq = gmma_desc(sq, 16, 1024), dk = gmma_desc(tile, 16, 1024);
  gmma::fence();
  if constexpr (NK > 0) {
    gmma::wgmma_ss_n64_first(sv, dq, dk);
#pragma unroll
    for (int kk = 1; kk < NK; ++kk) {
      const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;  // block kk / 4, 32-byte step within it
      gmma::wgmma_ss_n64(sv, gmma_desc_at(dq, off), gmma_desc_at(dk, off));
    }
  } else {
    gmma::wgmma_ss_n64_first(sv, dq, dk);
    for (int kk = 1; kk < nk; ++kk) {
      const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
      gmma::wgmma_ss_n64(sv, gmma_desc_at(dq, off), gmma_desc_at(dk, off));
    }
  }
  gmma::commit();
}
// The same, completed.
template <int NK>
__device__ __forceinline__ void compute_s64(float (&sv)[32], uint32_t sq, uint32_t tile, int nk) {
  issue_s64<NK>(sv, sq, tile, nk);
  gmma::wait<0>();
#pragma unroll
  for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
}
// Issue only (the caller waits), unrolled at d_r = 64 as compute_s64_dc.
template <int DC>
__device__ __forceinline__ void issue_s64_dc(float (&sv)[32], uint32_t sq, uint32_t tile, int nk) {
  if (nk == (DC + 64) / 16) issue_s64<(DC + 64) / 16>(sv, sq, tile, nk);
  else issue_s64<0>(sv, sq, tile, nk);
}
// S at d_c = DC: unrolled at d_r = 64 (DeepSeek's, Kimi-K2's and every TPLA slice's), the
// run-time loop for any other d_r.
template <int DC>
__device__ __forceinline__ void compute_s64_dc(float (&sv)[32], uint32_t sq, uint32_t tile, int nk) {
  if (nk == (DC + 64) / 16) compute_s64<(DC + 64) / 16>(sv, sq, tile, nk);
  else compute_s64<0>(sv, sq, tile, nk);
}
// The running-max step of an online softmax for a thread's two rows (each row spread over the 4
// threads of a quad): tmax holds this thread's part of the tile's row maxima. Reduces it over the
// quad, updates m_run, and gives alpha = exp2(old m - new m) (the factor for O and l) and m_use,
// the max the tile's exponentials subtract (0 for a row still all -inf). exp2fn: ex2.approx.ftz
// (ex2_ftz) on the wgmma paths, BF16 and FP8.
// slack > 0 (log2 units; the BF16 wgmma paths, quant::kDecodeMaxSlack): the running max moves only
// when the tile's max exceeds it by more than slack, so most tiles keep alpha = 1 exactly.
template <class Exp2>
__device__ __forceinline__ void row_max_step(float (&tmax)[2], float (&m_run)[2], float (&m_use)[2],
                                             float (&alpha)[2], Exp2 exp2fn, float slack = 0.f) {
  const float neg_inf = -__int_as_float(0x7f800000);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
    const float m_new = slack > 0.f ? (tmax[h] > m_run[h] + slack ? tmax[h] : m_run[h]) : fmaxf(m_run[h], tmax[h]);
    m_use[h] = (m_new == neg_inf) ? 0.f : m_new;
    alpha[h] = exp2fn(m_run[h] - m_use[h]);
    m_run[h] = m_new;
  }
}

// Online softmax of one tile of S held as NV accumulators (wgmma m64n(NV/2) layout: this
// thread's rows g and g + 8 of its warp's 16, columns 8 n + 2 tq + {0, 1}, tile columns from
// token j0), in two steps so that a caller can rescale O between them:
// softmax_max: scale into base 2, causal/length mask, running max update with the wgmma paths'
// slack (rows live in one quad; quant::DecodeTileConfig::max_slack, the twin's rule); alpha becomes
// the factor for O and l, m_use the max the exponentials subtract.
template <int NV>
__device__ __forceinline__ void softmax_max(float (&sv)[NV], int j0, int L, const int (&lim_off)[2], int tq,
                                            float scale_log2, float (&m_run)[2], float (&m_use)[2], float (&alpha)[2]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float tmax[2] = {neg_inf, neg_inf};
  if (j0 + 2 * NV <= L - max(lim_off[0], lim_off[1])) {  // no key of the tile is masked for either row
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      sv[i] *= scale_log2;
      tmax[(i >> 1) & 1] = fmaxf(tmax[(i >> 1) & 1], sv[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int h = (i >> 1) & 1;
      const int j = j0 + (i >> 2) * 8 + 2 * tq + (i & 1);
      const float x = (j < L - lim_off[h]) ? sv[i] * scale_log2 : neg_inf;
      sv[i] = x;
      tmax[h] = fmaxf(tmax[h], x);
    }
  }
  row_max_step(tmax, m_run, m_use, alpha, [](float x) { return ex2_ftz(x); }, quant::kDecodeMaxSlack);
}
// softmax_exp: sv becomes P (fp32) and l_run = l_run alpha + this tile's row sums (per thread).
template <int NV>
__device__ __forceinline__ void softmax_exp(float (&sv)[NV], const float (&m_use)[2], const float (&alpha)[2],
                                            float (&l_run)[2]) {
  float lsum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const float pv = ex2_ftz(sv[i] - m_use[(i >> 1) & 1]);
    lsum[(i >> 1) & 1] += pv;
    sv[i] = pv;
  }
  l_run[0] = l_run[0] * alpha[0] + lsum[0];
  l_run[1] = l_run[1] * alpha[1] + lsum[1];
}
// Both steps.
template <int NV>
__device__ __forceinline__ void softmax_tile(float (&sv)[NV], int j0, int L, const int (&lim_off)[2], int tq,
                                             float scale_log2, float (&m_run)[2], float (&l_run)[2], float (&alpha)[2]) {
  float m_use[2];
  softmax_max(sv, j0, L, lim_off, tq, scale_log2, m_run, m_use, alpha);
  softmax_exp(sv, m_use, alpha, l_run);
}

}  // namespace mla::kernels::detail
