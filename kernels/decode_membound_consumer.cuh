#pragma once
// The memory-bound path's consumer side (<= 16 query rows, 32-token tiles): what the four
// consumer warps do with a shared-memory ring of BF16 tiles, whoever fills it. The BF16 split
// kernel (decode_membound.cu) fills the ring with bulk copies of the cache; the 4-bit split
// kernel (kv4_decode.cu) with tiles it dequantises from FP4 / codebook pages. Same code, so the
// same arithmetic: a 4-bit cache decodes exactly as its BF16 dequantisation would.
#include "kernels/decode_device.cuh"
#include "kernels/decode_store.cuh"

namespace mla::kernels::detail {

constexpr int kV3Consumers = 4;
constexpr int kV3Threads = 32 * (kV3Consumers + 1);
constexpr int kV3BN = 32;
constexpr int kV3Stages = 2;  // per CTA, two CTAs per SM
constexpr int kV3PartFloats = 2 * kV3Consumers * 4 * 32 * 4;  // [2 buffers][warp][n-tile][lane][4]
constexpr int kV3Header = 128;  // mbarriers full[S], empty[S] (S <= 8)

template <int DC>
struct V3Cfg {
  static constexpr int kColsPerWarp = DC / kV3Consumers;
  static constexpr int kNtO = kColsPerWarp / 8;
  static constexpr int kKPerWarp = ((DC + 128) / 16 + kV3Consumers - 1) / kV3Consumers;
  static_assert(kNtO >= 1, "d_c >= 32");
  static constexpr size_t smem_bytes(int dim) {
    return kV3Header + kV3PartFloats * sizeof(float) + static_cast<size_t>(kV3Stages) * kV3BN * (dim + 8) * 2;
  }
};

// The consumer warps (warp < kV3Consumers) of a memory-bound split kernel, run over the part's
// (request, tile) run `in` (quant::kPartInfoInts ints): waits on full[stage] = bar0 + 8 stage
// for each tile of S stages at sK (rows of DC + d_r + 8 bf16), releases it on
// empty[stage] = bar0 + 8 (S + stage) (one arrive per consumer warp), and stores every row of
// the 16-row block starting at query row row0 (0 for the BF16 path's single block).
// S = Q K^T: warp w takes k-steps w, w + 4, ... of the d_c + d_r reduction for all 32 tokens
// (its Q fragments live in registers for the whole segment); the four fp32 partial tiles are
// exchanged through shared memory (sPart, double-buffered, one named barrier per tile) and every
// warp sums them in the same order ((w0 + w1) + w2) + w3, so all warps hold the same S, row max,
// P and l. P goes from the S accumulators straight into mma A fragments (bf16); O += P V: warp w
// owns d_c / 4 output columns (V by ldmatrix.trans). Exponentials by ex2.approx.ftz, as the wgmma
// paths: exp2f's range fix-up is ~3 more instructions per element, and every warp evaluates the
// whole tile's softmax (9% fewer instructions in the tile loop, same outputs, same time on an
// H100: docs/gpu-notes.md, session 16).
template <int DC, int S>
__device__ __forceinline__ void membound_consume(const quant::Bf16DecodeParams& p, const int32_t* __restrict__ in,
                                                 const int32_t* __restrict__ offsets, float* o_acc, float* lse_acc,
                                                 uint32_t bar0, float4* sPart, const bf16* sK, int warp, int lane,
                                                 int row0 = 0) {
  using C = V3Cfg<DC>;
  constexpr int BN = kV3BN;
  const int b_begin = in[0], t_begin = in[1], end_b = in[2], end_t = in[3];
  const int dim = DC + p.d_r;
  const int srow = dim + 8;
  const bf16* q = reinterpret_cast<const bf16*>(p.q);
  const int g = lane / 4, tq = lane % 4;
  const int rows = p.s_q * p.heads;
  const int nk = dim / 16;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  int lim_off[2];
  for (int h = 0; h < 2; ++h) {
    const int tok = min((row0 + g + 8 * h) / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  const uint32_t k_lane_off = static_cast<uint32_t>((((lane % 8) + (lane / 16) * 8) * srow + ((lane / 8) & 1) * 8) * 2);
  const uint32_t v_lane_off = static_cast<uint32_t>((((lane % 8) + ((lane / 8) & 1) * 8) * srow + warp * C::kColsPerWarp +
                                                     (lane / 16) * 8) * 2);
  int it = 0, split = in[4];
  for (int b = b_begin, t = t_begin; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
    const int n_split = offsets[b + 1] - offsets[b];

    // Q fragments of this warp's k-steps (rows g, g + 8; rows past `rows` are zero).
    uint32_t qa[C::kKPerWarp][4];
    {
      const bf16* q0 = q + (static_cast<size_t>(b) * rows + row0 + g) * dim;
      const bf16* q1 = q0 + static_cast<size_t>(8) * dim;
      const bool ok0 = row0 + g < rows, ok1 = row0 + g + 8 < rows;
#pragma unroll
      for (int s = 0; s < C::kKPerWarp; ++s) {
        const int kk = warp + kV3Consumers * s;
        const int c = kk * 16 + 2 * tq;
        const bool in_k = kk < nk;
        qa[s][0] = (in_k && ok0) ? *reinterpret_cast<const uint32_t*>(q0 + c) : 0u;
        qa[s][1] = (in_k && ok1) ? *reinterpret_cast<const uint32_t*>(q1 + c) : 0u;
        qa[s][2] = (in_k && ok0) ? *reinterpret_cast<const uint32_t*>(q0 + c + 8) : 0u;
        qa[s][3] = (in_k && ok1) ? *reinterpret_cast<const uint32_t*>(q1 + c + 8) : 0u;
      }
    }

    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kNtO][4];
#pragma unroll
    for (int n = 0; n < C::kNtO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S;
      mbar_wait(bar0 + 8 * stage, (it / S) & 1);
      const uint32_t tile_addr = smem_u32(sK + stage * BN * srow);

      // ---- partial S = Q K^T over this warp's k-steps, 16 rows x 32 tokens ----
      float s_acc[4][4];
#pragma unroll
      for (int n = 0; n < 4; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
#pragma unroll
      for (int s = 0; s < C::kKPerWarp; ++s) {
        const int kk = warp + kV3Consumers * s;
        if (kk < nk) {
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            uint32_t bb[4];
            ldsm_x4(tile_addr + k_lane_off + (np * 16 * srow + kk * 16) * 2, bb);
            mma_bf16(s_acc[2 * np], qa[s], bb[0], bb[1]);
            mma_bf16(s_acc[2 * np + 1], qa[s], bb[2], bb[3]);
          }
        }
      }
      float4* part = sPart + (it & 1) * (kV3Consumers * 4 * 32);
#pragma unroll
      for (int n = 0; n < 4; ++n)
        part[(warp * 4 + n) * 32 + lane] = make_float4(s_acc[n][0], s_acc[n][1], s_acc[n][2], s_acc[n][3]);
      named_bar_sync(1, 32 * kV3Consumers);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        float4 tot = part[n * 32 + lane];
#pragma unroll
        for (int w = 1; w < kV3Consumers; ++w) {
          const float4 v = part[(w * 4 + n) * 32 + lane];
          tot.x += v.x;
          tot.y += v.y;
          tot.z += v.z;
          tot.w += v.w;
        }
        s_acc[n][0] = tot.x;
        s_acc[n][1] = tot.y;
        s_acc[n][2] = tot.z;
        s_acc[n][3] = tot.w;
      }

      // ---- scale into base 2, causal mask, row max over the 32 tokens (4 lanes) ----
      const int jbase = ti * BN;
      float tmax[2] = {neg_inf, neg_inf};
      if (jbase + BN <= L - (p.s_q - 1)) {  // every key of the tile visible to every row
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s_acc[n][e] *= scale_log2;
            tmax[e >> 1] = fmaxf(tmax[e >> 1], s_acc[n][e]);
          }
      } else {
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e >> 1;
            const int j = jbase + n * 8 + 2 * tq + (e & 1);
            const float x = (j < L - lim_off[h]) ? s_acc[n][e] * scale_log2 : neg_inf;
            s_acc[n][e] = x;
            tmax[h] = fmaxf(tmax[h], x);
          }
      }
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
        const float m_new = fmaxf(m_run[h], tmax[h]);
        m_use[h] = (m_new == neg_inf) ? 0.f : m_new;  // nothing seen yet: avoid inf - inf
        alpha[h] = ex2_ftz(m_run[h] - m_use[h]);
        m_run[h] = m_new;
      }
      float lsum[2] = {0.f, 0.f};
      uint32_t pa[2][4];  // P as the A fragments of the two 16-token k-steps
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = ex2_ftz(s_acc[n][e] - m_use[e >> 1]);
          lsum[e >> 1] += pv;
          s_acc[n][e] = pv;
        }
        pa[n >> 1][(n & 1) * 2 + 0] = pack_bf16(s_acc[n][0], s_acc[n][1]);
        pa[n >> 1][(n & 1) * 2 + 1] = pack_bf16(s_acc[n][2], s_acc[n][3]);
      }
      l_run[0] = l_run[0] * alpha[0] + lsum[0];
      l_run[1] = l_run[1] * alpha[1] + lsum[1];

      // ---- O = O * alpha + P V for 16 rows x kColsPerWarp columns ----
      // alpha is exactly 1 where the row max did not move (exp2(0)): skip the rescale then.
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int n = 0; n < C::kNtO; ++n) {
          acc[n][0] *= alpha[0];
          acc[n][1] *= alpha[0];
          acc[n][2] *= alpha[1];
          acc[n][3] *= alpha[1];
        }
      }
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint32_t vaddr = tile_addr + v_lane_off + ks * 16 * srow * 2;
#pragma unroll
        for (int np = 0; np < C::kNtO / 2; ++np) {
          uint32_t bb[4];
          ldsm_x4_t(vaddr + np * 16 * 2, bb);
          mma_bf16(acc[2 * np], pa[ks], bb[0], bb[1]);
          mma_bf16(acc[2 * np + 1], pa[ks], bb[2], bb[3]);
        }
        if constexpr (C::kNtO % 2 == 1) {  // lanes 0-15 address the last 8 columns
          uint32_t b0, b1;
          ldsm_x2_t(vaddr + (C::kNtO - 1) * 8 * 2 - (lane / 16) * 8 * 2, b0, b1);
          mma_bf16(acc[C::kNtO - 1], pa[ks], b0, b1);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + stage));  // this warp is done with the stage
    }

    // ---- epilogue: row sums (identical in every warp), normalise, write ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
      const int r = row0 + g + 8 * h;
      if (r >= rows) continue;
      const float l = l_run[h];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, warp * C::kColsPerWarp + 2 * tq, C::kNtO,
                [&](int n) { return make_float2(acc[n][2 * h], acc[n][2 * h + 1]); }, inv, lse, warp == 0 && tq == 0);
    }
  }
}

}  // namespace mla::kernels::detail
