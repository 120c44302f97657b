// The mma.sync many-head path: 64-row blocks (8 warps: 4 row groups x 2 column groups), 32-token
// tiles through a 3-stage cp.async ring, one CTA per SM. It runs the > 16-row shapes the wgmma
// paths do not cover (d_c < 128, or d_c + d_r > 576) and variant 7 (this path on any shape).
//
// A CTA owns one row block (64 query rows = (token, head) pairs of one request) and walks its
// part's (request, tile) run. For S = Q K^T a warp computes its 16 rows x (BN / NWC) tokens
// over the full d_c + d_r; the row max is exchanged through shared memory; P (bf16) goes to
// shared memory; for O += P V a warp owns its 16 rows x (d_c / NWC) output columns (V = the
// tile's first d_c columns, read through ldmatrix.trans). Tiles are zero-filled past the
// request's length so NaN-poisoned page tails never reach P.V.
#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_store.cuh"

namespace mla::kernels::detail {
namespace {

using quant::kPartInfoInts;

template <int DC, int RG, int NWC, int BN, int STAGES, int MIN_CTAS>
struct SplitCfg {
  static constexpr int kWarps = RG * NWC;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * RG;
  static constexpr int kTokPerWarp = BN / NWC;  // S columns of one warp
  static constexpr int kNtS = kTokPerWarp / 8;
  static constexpr int kColsPerWarp = DC / NWC;  // O columns of one warp
  static constexpr int kNtO = kColsPerWarp / 8;
  static constexpr int kPStride = BN + 8;  // +16 B per row: conflict-free ldmatrix
  static_assert(kNtS >= 1 && kNtO >= 1 && BN % 16 == 0, "tile shape");
  // Shared bytes for a row of `dim` values (+16 B pad per row, see above).
  static constexpr size_t smem_bytes(int dim) {
    const size_t srow = static_cast<size_t>(dim) + 8;
    return (kRows * srow + STAGES * BN * srow + kRows * kPStride) * 2 + 2 * NWC * kRows * sizeof(float);
  }
};
// Walks a (row, chunk) grid of 16-byte chunks with a fixed stride, without a division per step.
struct ChunkWalker {
  int r, k;
  const int dr, dk, cpr;
  __device__ ChunkWalker(int start, int stride, int chunks_per_row)
      : r(start / chunks_per_row), k(start % chunks_per_row), dr(stride / chunks_per_row),
        dk(stride % chunks_per_row), cpr(chunks_per_row) {}
  __device__ void next() {
    r += dr;
    k += dk;
    if (k >= cpr) {
      k -= cpr;
      ++r;
    }
  }
};

template <int DC, int RG, int NWC, int BN, int STAGES, int MIN_CTAS>
__global__ void __launch_bounds__(SplitCfg<DC, RG, NWC, BN, STAGES, MIN_CTAS>::kThreads, MIN_CTAS)
    decode_split_kernel(const quant::Bf16DecodeParams p, const int32_t* __restrict__ info,
                        const int32_t* __restrict__ offsets, float* __restrict__ o_acc,
                        float* __restrict__ lse_acc) {
  using C = SplitCfg<DC, RG, NWC, BN, STAGES, MIN_CTAS>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  griddep_wait();  // the schedule (previous kernel) is complete from here on
  const int dim = DC + p.d_r;
  const int srow = dim + 8;
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kRows][srow]
  bf16* sK = sQ + C::kRows * srow;               // [STAGES][BN][srow]
  bf16* sP = sK + STAGES * BN * srow;            // [kRows][kPStride]
  float* sMax = reinterpret_cast<float*>(sP + C::kRows * C::kPStride);  // [NWC][kRows]
  float* sSum = sMax + NWC * C::kRows;                                   // [NWC][kRows]

  const bf16* q = reinterpret_cast<const bf16*>(p.q);
  const bf16* cache = reinterpret_cast<const bf16*>(p.kv_cache);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp % RG, wc = warp / RG;
  const int g = lane / 4, tq = lane % 4;
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * C::kRows;  // grid: split_grid
  const int chunks_per_row = dim / 8;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);

  // This thread's two rows (g and g + 8 of its row group) and their causal key limits' offsets.
  int my_row[2], lim_off[2];
  for (int h = 0; h < 2; ++h) {
    my_row[h] = row0 + rg * 16 + g + 8 * h;
    const int tok = min(my_row[h] / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }

  const int32_t* in = info + blockIdx.y * kPartInfoInts;
  int b = in[0], t = in[1], split = in[4];
  const int end_b = in[2], end_t = in[3];
  while (b < end_b || (b == end_b && t < end_t)) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
    const int n_split = offsets[b + 1] - offsets[b];
    const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;

    // Q block; rows past `rows` are zero-filled (their results are never written).
    {
      const bf16* qb = q + static_cast<size_t>(b) * rows * dim;
      ChunkWalker w(threadIdx.x, C::kThreads, chunks_per_row);
      for (; w.r < C::kRows; w.next()) {
        const int gr = row0 + w.r;
        const bool ok = gr < rows;
        cp_async_16(smem_u32(sQ + w.r * srow + w.k * 8), ok ? qb + static_cast<size_t>(gr) * dim + w.k * 8 : q, ok);
      }
    }
    auto load_tile = [&](int ti, int stage) {
      const int j0 = ti * BN;
      const bf16* base = cache;
      int valid = 0;
      if (j0 < L) {
        const int slot = j0 / p.page_size;
        const int page = slot < p.max_pages ? ptab[slot] : -1;
        if (page >= 0 && page < p.num_pages) {
          base = cache + (static_cast<size_t>(page) * p.page_size + j0 % p.page_size) * dim;
          valid = min(BN, L - j0);
        } else if (threadIdx.x == 0 && p.error_flag != nullptr) {
          atomicExch(p.error_flag, 1);  // bad device data: tile skipped (zero keys), flagged
        }
      }
      bf16* dst = sK + stage * BN * srow;
      ChunkWalker w(threadIdx.x, C::kThreads, chunks_per_row);
      for (; w.r < BN; w.next()) {
        const bool ok = w.r < valid;
        cp_async_16(smem_u32(dst + w.r * srow + w.k * 8), ok ? base + static_cast<size_t>(w.r) * dim + w.k * 8 : cache,
                    ok);
      }
    };

    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kNtO][4];
#pragma unroll
    for (int n = 0; n < C::kNtO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    const int nt = stop - t;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < nt) load_tile(t + s, s);
      cp_async_commit();  // the Q block rides in the first group
    }
    const uint32_t q_addr = smem_u32(sQ + (rg * 16 + (lane % 16)) * srow + (lane / 16) * 8);
    for (int i = 0; i < nt; ++i) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile i visible to all; every warp is done with tile i-1's stage
      {
        const int nx = i + STAGES - 1;
        if (nx < nt) load_tile(t + nx, nx % STAGES);
        cp_async_commit();
      }
      const bf16* sKs = sK + (i % STAGES) * BN * srow;

      // ---- S = Q K^T for 16 rows x kTokPerWarp tokens, fp32 ----
      float s_acc[C::kNtS][4];
#pragma unroll
      for (int n = 0; n < C::kNtS; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
      const uint32_t k_addr =
          smem_u32(sKs + (wc * C::kTokPerWarp + (lane % 8) + (lane / 16) * 8) * srow + ((lane / 8) & 1) * 8);
      const uint32_t k_addr_x2 = smem_u32(sKs + (wc * C::kTokPerWarp + (C::kNtS - 1) * 8 + (lane % 8)) * srow +
                                          ((lane / 8) & 1) * 8);
#pragma unroll 4
      for (int k0 = 0; k0 < dim; k0 += 16) {  // unrolled: several ldmatrix in flight per mma chain
        uint32_t a[4];
        ldsm_x4(q_addr + k0 * 2, a);
#pragma unroll
        for (int np = 0; np < C::kNtS / 2; ++np) {
          uint32_t bb[4];
          ldsm_x4(k_addr + (np * 16 * srow + k0) * 2, bb);
          mma_bf16(s_acc[2 * np], a, bb[0], bb[1]);
          mma_bf16(s_acc[2 * np + 1], a, bb[2], bb[3]);
        }
        if constexpr (C::kNtS % 2 == 1) {  // 8 tokens per warp: one n-tile, lanes 0-15 address it
          uint32_t b0, b1;
          ldsm_x2(k_addr_x2 + k0 * 2, b0, b1);
          mma_bf16(s_acc[C::kNtS - 1], a, b0, b1);
        }
      }

      // ---- scale into base 2, causal mask, row max across the CTA's column warps ----
      const int jbase = (t + i) * BN + wc * C::kTokPerWarp;
      float tmax[2] = {neg_inf, neg_inf};
#pragma unroll
      for (int n = 0; n < C::kNtS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const int j = jbase + n * 8 + 2 * tq + (e & 1);
          const float x = (j < L - lim_off[h]) ? s_acc[n][e] * scale_log2 : neg_inf;
          s_acc[n][e] = x;
          tmax[h] = fmaxf(tmax[h], x);
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
      }
      if (tq == 0) {
        sMax[wc * C::kRows + rg * 16 + g] = tmax[0];
        sMax[wc * C::kRows + rg * 16 + g + 8] = tmax[1];
      }
      __syncthreads();
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tm = neg_inf;
#pragma unroll
        for (int w = 0; w < NWC; ++w) tm = fmaxf(tm, sMax[w * C::kRows + rg * 16 + g + 8 * h]);
        const float m_new = fmaxf(m_run[h], tm);
        m_use[h] = (m_new == neg_inf) ? 0.f : m_new;  // nothing seen yet: avoid inf - inf
        alpha[h] = exp2f(m_run[h] - m_use[h]);
        m_run[h] = m_new;
      }
      float lsum[2] = {0.f, 0.f};
#pragma unroll
      for (int n = 0; n < C::kNtS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = exp2f(s_acc[n][e] - m_use[e >> 1]);
          lsum[e >> 1] += pv;
          s_acc[n][e] = pv;
        }
        const int col = wc * C::kTokPerWarp + n * 8 + 2 * tq;
        *reinterpret_cast<__nv_bfloat162*>(sP + (rg * 16 + g) * C::kPStride + col) =
            __floats2bfloat162_rn(s_acc[n][0], s_acc[n][1]);
        *reinterpret_cast<__nv_bfloat162*>(sP + (rg * 16 + g + 8) * C::kPStride + col) =
            __floats2bfloat162_rn(s_acc[n][2], s_acc[n][3]);
      }
      l_run[0] = l_run[0] * alpha[0] + lsum[0];  // per-thread partial sums, same alpha everywhere
      l_run[1] = l_run[1] * alpha[1] + lsum[1];
      __syncthreads();  // P complete

      // ---- O = O * alpha + P V for 16 rows x kColsPerWarp columns ----
#pragma unroll
      for (int n = 0; n < C::kNtO; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) {
        uint32_t a[4];
        ldsm_x4(smem_u32(sP + (rg * 16 + (lane % 16)) * C::kPStride + ks * 16 + (lane / 16) * 8), a);
        const bf16* vrow = sKs + (ks * 16 + (lane % 8) + ((lane / 8) & 1) * 8) * srow + wc * C::kColsPerWarp;
#pragma unroll
        for (int np = 0; np < C::kNtO / 2; ++np) {
          uint32_t bb[4];
          ldsm_x4_t(smem_u32(vrow + np * 16 + (lane / 16) * 8), bb);
          mma_bf16(acc[2 * np], a, bb[0], bb[1]);
          mma_bf16(acc[2 * np + 1], a, bb[2], bb[3]);
        }
        if constexpr (C::kNtO % 2 == 1) {
          uint32_t b0, b1;
          ldsm_x2_t(smem_u32(vrow + (C::kNtO - 1) * 8), b0, b1);
          mma_bf16(acc[C::kNtO - 1], a, b0, b1);
        }
      }
    }

    // ---- epilogue: total row sums, normalise, write final output or this split's partial ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    }
    if (tq == 0) {
      sSum[wc * C::kRows + rg * 16 + g] = l_run[0];
      sSum[wc * C::kRows + rg * 16 + g + 8] = l_run[1];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = 0.f;
#pragma unroll
      for (int w = 0; w < NWC; ++w) l += sSum[w * C::kRows + rg * 16 + g + 8 * h];
      const int r = my_row[h];
      if (r >= rows) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, wc * C::kColsPerWarp + 2 * tq, C::kNtO,
                [&](int n) { return make_float2(acc[n][2 * h], acc[n][2 * h + 1]); }, inv, lse, wc == 0 && tq == 0);
    }
    __syncthreads();  // sQ, sSum and the stages are reused by the next segment
    ++split;
    ++b;
    t = 0;
  }
}

template <int DC>
void launch_for_dc(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  constexpr int RG = 4, NWC = 2, BN = 32, STAGES = 3, MIN_CTAS = 1;
  using C = SplitCfg<DC, RG, NWC, BN, STAGES, MIN_CTAS>;
  auto kernel = decode_split_kernel<DC, RG, NWC, BN, STAGES, MIN_CTAS>;
  static cuda::SmemLimitSet attr_set;  // the largest supported d_r (128) sets the ceiling once
  cuda::set_smem_limit_once(kernel, C::smem_bytes(DC + 128), attr_set,
                            "mla decode split kernel (mma.sync 64-row path) smem limit");
  launch(kernel, split_grid(p.num_parts, row_blocks), dim3(C::kThreads), C::smem_bytes(DC + p.d_r), stream, use_pdl(p),
         "split kernel (mma.sync 64-row path) launch", p, static_cast<const int32_t*>(w.info),
         static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc);
}

}  // namespace

void launch_mma64(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  switch (p.d_c) {
    case 32: launch_for_dc<32>(p, w, row_blocks, stream); break;
    case 64: launch_for_dc<64>(p, w, row_blocks, stream); break;
    case 128: launch_for_dc<128>(p, w, row_blocks, stream); break;
    case 256: launch_for_dc<256>(p, w, row_blocks, stream); break;
    case 512: launch_for_dc<512>(p, w, row_blocks, stream); break;
    default: throw InputError("mla decode params: d_c = " + std::to_string(p.d_c));
  }
}

}  // namespace mla::kernels::detail
