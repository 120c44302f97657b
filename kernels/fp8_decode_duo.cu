// The FP8 split kernel for requests of <= 16 query rows with two tile chains per SM: each CTA
// runs two split parts of the schedule at once (parts 2 x and 2 x + 1), one per consumer
// warpgroup, each with its own ring, query, P^T buffer and online softmax. Called by fp8_decode
// (kernels/fp8_decode.cu) after the prologue (schedule, query quantisation), before the combine.
//
// Why: the narrow kernel (fp8_decode_narrow.cu) runs one tile chain per SM (warpgroup 0's S +
// softmax handing P to the P.V warpgroups through two buffers) and that chain, not HBM, bounds it:
// with every request reading request 0's pages (L2-resident) it still takes 170 us at H = 16,
// 8K against 187 us from HBM (docs/benchmarks.md, ninth session). Two independent chains give
// the SM's schedulers a second chain's instructions to issue while one waits.
// Each consumer warpgroup runs its whole chain per tile, as a warpgroup of the pair kernel
// (fp8_decode_pair.cu) does at 64 rows, with the narrow kernel's transposed products:
//   S^T [64 tokens x 16] = K8 Q8^T + K_rope Q_rope^T   (the tile as it lands is A, the query B);
//   S^T staged through shared memory so each thread owns one query row and 8 of its tokens: the
//   online softmax, s_k folded into P, P re-quantised per row and tile, P8^T into the buffer;
//   O^T [d_c x 16] = O^T gamma + V8^T P8^T, all d_c channels (d_c / 64 m64 blocks), V^T built in
//   registers (vt_fragments_ks); the stage is released once its fragments are in registers.
// P.V of tile i and S of tile i + 1 are issued back to back behind one wait.
// Warpgroup 2: two threads (warps 8 and 9) issue the bulk copies of chain 0's and chain 1's part.
// Registers (setmaxnreg): 240 per chain, 24 for the producers (the pair kernel's split).
// Numerics: per split the narrow kernel's (the twin's rounding points); the splits merge in the
// combine kernel, as every split of the schedule does.
#include <cuda_fp8.h>

#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::fp8 {
namespace {

constexpr int kThreads = 384, kN = 16;  // kN: query rows (wgmma's N)
constexpr int kLPR = 128 / kN, kTPT = 64 / kLPR;  // softmax: lanes per row, tokens per lane

template <int DC, int DR>
struct DCfg {
  static constexpr int kNB = DC / 64;  // m64 channel blocks: all of d_c
  static constexpr int kRB = 2 * DR;
  static constexpr int kRMode = kRB == 128 ? 1 : 2;
  static constexpr uint32_t kRSbo = 8 * kRB;
  static constexpr uint32_t kStage = StageBytes<DC, DR>::kAligned;
  static constexpr int kSRow = 68;  // S^T staging row (floats): 64 tokens + 4, conflict-free stores
  // Per chain: Q8, Q_rope (1024-aligned blocks), P8^T (16 rows of 128 bytes), S^T staging, gamma
  // [16] and fin [16][2] floats.
  static constexpr uint32_t kQ8 = kN * DC, kQR = kN * kRB, kP = kN * 128, kSS = kN * kSRow * 4, kSmall = 3 * kN * 4;
  static constexpr uint32_t kChain = (kQ8 + kQR + kP + kSS + kSmall + 1023) / 1024 * 1024;
  static constexpr size_t kFixed = 1024 + 2 * kChain;
  // Stages per chain: as many as fit (each with 16 bytes of barriers and 4 of valid count), at most 4.
  static constexpr int kFit = static_cast<int>((detail::kMaxSmemPerBlock - kFixed) / (2 * (kStage + 20)));
  static constexpr int kS = kFit < 4 ? kFit : 4;
  static_assert(kS >= 2, "fp8 duo kernel: fewer than two ring stages per chain fit");
  static constexpr size_t smem() { return kFixed + 2 * kS * (kStage + 20); }
};

// Named barriers (id 0 is __syncthreads), each + the chain (0, 1): its query load, its S^T
// staged, its P^T and gamma (and the epilogue's fin) written.
constexpr int kBarQ = 1, kBarS = 3, kBarP = 5;

template <int DC, int DR>
__global__ void __launch_bounds__(kThreads, 1)
    duo_split_kernel(const quant::Fp8DecodeParams p, const int32_t* __restrict__ info,
                     const int32_t* __restrict__ offsets, float* __restrict__ o_acc, float* __restrict__ lse_acc,
                     int parts) {
  using C = DCfg<DC, DR>;
  constexpr int S = C::kS, NB = C::kNB, NC = kN / 4;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Chain c: its rings' stages, then its barriers and valid counts after both chains' stages.
  const uint32_t sStages = base + 2 * C::kChain;
  const uint32_t sBars = sStages + 2 * S * C::kStage;
  auto ring_st = [&](int c) { return sStages + c * S * C::kStage; };
  auto ring_bar = [&](int c) { return sBars + c * 16 * S; };
  auto ring_valid = [&](int c) { return sBars + 2 * 16 * S + c * 4 * S; };
  init_stage_ring(ring_bar(0), S, 4);  // each chain's four warps release its stages
  init_stage_ring(ring_bar(1), S, 4);

  if (warp >= 8) {  // ---- producers: warp 8 for chain 0, warp 9 for chain 1 ----
    // 24: the registers the chains' 240 draw on come only from what this warpgroup gives back
    // (at 32 their setmaxnreg.inc waited forever); a few bytes of the copy loop spill.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    const int c = warp - 8, part = 2 * blockIdx.x + c;
    if (c < 2 && lane == 0 && part < parts)
      produce_tiles<DC, DR, S>(p, info + part * quant::kPartInfoInts, ring_st(c), ring_bar(c), ring_valid(c));
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  // Broadcast from lane 0 so ptxas knows the chain is warp-uniform (C7520).
  const int ch = __shfl_sync(0xffffffffu, warp / 4, 0), wiw = warp % 4, tid = threadIdx.x % 128;
  const int part = 2 * blockIdx.x + ch;
  if (part >= parts) return;
  const int g = lane / 4, tq = lane % 4;
  const float neg_inf = -__int_as_float(0x7f800000);
  const uint32_t my = base + ch * C::kChain;
  const uint32_t sQ8 = my, sQR = sQ8 + C::kQ8, sP = sQR + C::kQR, sSs = sP + C::kP;
  float* ss = reinterpret_cast<float*>(gbase + (sSs - base));           // [16][kSRow]
  float* gam = reinterpret_cast<float*>(gbase + (sSs + C::kSS - base));  // [16]
  float* fin = gam + kN;                                                 // [16][2]
  const uint32_t sSt = ring_st(ch), bar0 = ring_bar(ch), sValid = ring_valid(ch);
  const int32_t* in = info + part * quant::kPartInfoInts;
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  // The softmax's view: row n, tokens tok0 .. tok0 + 7 of each tile.
  const int n = tid / kLPR, q = tid % kLPR, tok0 = q * kTPT;
  const int m0 = 16 * wiw + g;  // the S^T accumulator's tokens of this thread: m0, m0 + 8
  const PvChannels pc = pv_channels<2 * DC>(0, wiw, g);  // all d_c channels (the first half of 2 d_c)
  const uint64_t dq = desc_sw(sQ8, 1024, 1), dqr = desc_sw(sQR, C::kRSbo, C::kRMode);
  const uint64_t dp = desc_sw(sP, 1024, 1);
  auto wait_full = [&](int it_) { detail::mbar_wait(bar0 + 8 * (it_ % S), (it_ / S) & 1); };
  float sacc[kN / 2];  // S^T of a tile
  auto issue_s = [&](int it_) {
    const uint32_t st = sSt + (it_ % S) * C::kStage;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      sacc[i] = 0.f;
      gmma::fence_operand(sacc[i]);
    }
    const uint64_t dt = desc_sw(st, 1024, 1), dtr = desc_sw(st + 64 * DC, C::kRSbo, C::kRMode);
#pragma unroll
    for (int kk = 0; kk < DC / 32; ++kk) {
      const uint32_t kb = kk * 32;
      ss_e4m3_narrow<kN>(sacc, detail::gmma_desc_at(dt, (kb >> 7) * 8192 + (kb & 127)),
                         detail::gmma_desc_at(dq, (kb >> 7) * (kN * 128) + (kb & 127)));
    }
#pragma unroll
    for (int kk = 0; kk < DR / 16; ++kk)
      ss_bf16_narrow<kN>(sacc, detail::gmma_desc_at(dtr, kk * 32), detail::gmma_desc_at(dqr, kk * 32));
    gmma::commit();
  };

  int split = in[4];
  int it = 0;
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
    const int n_split = offsets[b + 1] - offsets[b];
    detail::named_bar_sync(kBarQ + ch, 128);  // the chain is done with the previous query and fin
    load_query<DC, DR, kN>(p, b, rows, 0, sQ8, sQR, tid, 128);
    detail::named_bar_sync(kBarQ + ch, 128);
    const float rowf = n < rows ? p.q_scale[static_cast<size_t>(b) * rows + n] * (p.scale * detail::kLog2e) : 0.f;
    const int lim_off = p.s_q - 1 - min(n / p.heads, p.s_q - 1);
    float m_run = neg_inf, l_run = 0.f, sig = 1.f;
    float acc[NB][kN / 2];
#pragma unroll
    for (int mb = 0; mb < NB; ++mb)
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) acc[mb][i] = 0.f;
    pv_fence_acc<NB, kN>(acc);
    // Softmax of tile ti_ (ring slot it_) from its finished S^T: staged, then row n's 8 tokens;
    // P8^T and gamma into the chain's buffers, published to the chain.
    auto softmax_to_p = [&](int ti_, int it_) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) gmma::fence_operand(sacc[i]);
#pragma unroll
      for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) ss[acc_col(c, tq) * C::kSRow + m0 + 8 * h] = sacc[acc_reg(c, h)];
      detail::named_bar_sync(kBarS + ch, 128);
      const int stage = it_ % S;
      const uint32_t st = sSt + stage * C::kStage;
      const int j0 = ti_ * kT;
      const int valid = static_cast<int>(lds32(sValid + 4 * stage));
      const float* skp = reinterpret_cast<const float*>(gbase + (st - base) + 64 * (DC + C::kRB));
      float x[kTPT], skv[kTPT];
#pragma unroll
      for (int i = 0; i < kTPT; i += 4) {
        const float4 a = *reinterpret_cast<const float4*>(ss + n * C::kSRow + tok0 + i);
        const float4 k = *reinterpret_cast<const float4*>(skp + tok0 + i);
        x[i] = a.x, x[i + 1] = a.y, x[i + 2] = a.z, x[i + 3] = a.w;
        skv[i] = k.x, skv[i + 1] = k.y, skv[i + 2] = k.z, skv[i + 3] = k.w;
      }
      const int lim = min(L - lim_off, j0 + valid);
      float tmax = neg_inf;
#pragma unroll
      for (int i = 0; i < kTPT; ++i) {
        x[i] = (j0 + tok0 + i < lim) ? (x[i] * skv[i]) * rowf : neg_inf;
        tmax = fmaxf(tmax, x[i]);
      }
#pragma unroll
      for (int o = 1; o < kLPR; o *= 2) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float m_new = fmaxf(m_run, tmax);
      const float m_use = (m_new == neg_inf) ? 0.f : m_new;
      const float alpha = exp2f(m_run - m_use);
      m_run = m_new;
      float psum = 0.f, amax = 0.f;
#pragma unroll
      for (int i = 0; i < kTPT; ++i) {
        const bool live = j0 + tok0 + i < lim;
        const float pv = live ? exp2f(x[i] - m_use) : 0.f;
        psum += pv;
        const float pp = live ? pv * skv[i] : 0.f;
        amax = fmaxf(amax, pp);
        x[i] = pp;
      }
#pragma unroll
      for (int o = 1; o < kLPR; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const float sg = amax > 0.f ? amax / quant::kFp8CacheMax : sig;
      const float inv = 1.f / sg;
      const float gamma = alpha * (sig * inv);
      l_run = l_run * gamma + psum * inv;
      sig = sg;
      const uint32_t pw0 = pack_e4m3(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
      const uint32_t pw1 = pack_e4m3(x[4] * inv, x[5] * inv, x[6] * inv, x[7] * inv);
      const uint32_t pa = sP + n * 128 + (((tok0 >> 4) ^ (n & 7)) << 4) + (tok0 & 15);
      asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(pa), "r"(pw0), "r"(pw1) : "memory");
      if (q == 0) gam[n] = gamma;
      detail::fence_proxy_async();              // P^T (generic stores) is read by wgmma
      detail::named_bar_sync(kBarP + ch, 128);  // and gamma by every thread of the chain
    };
    if (t < stop) {  // the first tile's S
      wait_full(it);
      issue_s(it);
      gmma::wait<0>();
      softmax_to_p(t, it);
    }
    for (int ti = t; ti < stop; ++ti, ++it) {
      const bool more = ti + 1 < stop;
      const int stage = it % S;
      const uint32_t st = sSt + stage * C::kStage;
      const int valid = static_cast<int>(lds32(sValid + 4 * stage));
      uint32_t fr0[NB][4], fr1[NB][4];
      vt_fragments_ks<NB>(st, pc.cofs, pc.chunk, tq, valid, 0, fr0);
      vt_fragments_ks<NB>(st, pc.cofs, pc.chunk, tq, valid, 1, fr1);
      __syncwarp();
      if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));  // S, s_k and V^T read: free
      pv_rescale<NB, kN>(acc, gam, tq);
      if (more) wait_full(it + 1);
      gmma::fence();
      pv_mma_ks<NB, kN>(acc, fr0, dp);
      pv_mma_ks<NB, kN>(acc, fr1, detail::gmma_desc_at(dp, 32));
      gmma::commit();
      if (more) issue_s(it + 1);
      gmma::wait<0>();
      pv_fence_acc<NB, kN>(acc);
#pragma unroll
      for (int mb = 0; mb < NB; ++mb)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          gmma::fence_operand(fr0[mb][r]);
          gmma::fence_operand(fr1[mb][r]);
        }
      if (more) softmax_to_p(ti + 1, it + 1);
    }
    // ---- epilogue: 1/l and LSE of row n, then the chain's d_c columns ----
#pragma unroll
    for (int o = 1; o < kLPR; o *= 2) l_run += __shfl_xor_sync(0xffffffffu, l_run, o);
    if (q == 0) {
      const bool empty = l_run == 0.f;
      fin[2 * n] = empty ? 0.f : 1.f / l_run;
      fin[2 * n + 1] = empty ? neg_inf : (m_run + log2f(sig * l_run)) * detail::kLn2;
    }
    detail::named_bar_sync(kBarP + ch, 128);
    store_pv_rows<DC, NB, kN>(p, o_acc, lse_acc, b, split, n_split, rows, 0, pc.c0, acc, fin, tq,
                              wiw == 0 && g == 0);
  }
}

template <int DC, int DR>
void launch_cfg(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  static bool smem_set = false;
  const size_t smem = DCfg<DC, DR>::smem();
  cuda::set_smem_limit_once(duo_split_kernel<DC, DR>, smem, smem_set, "fp8 duo decode split kernel smem limit");
  duo_split_kernel<DC, DR><<<dim3((parts + 1) / 2), kThreads, smem, stream>>>(p, w.info, w.offsets, w.o_acc,
                                                                               w.lse_acc, parts);
  cuda::check(cudaGetLastError(), "fp8 duo decode split launch", "mla decode");
}

}  // namespace

void launch_duo(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  const bool r64 = p.d_r == 64;
  if (p.d_c == 128) r64 ? launch_cfg<128, 64>(p, w, parts, stream) : launch_cfg<128, 32>(p, w, parts, stream);
  else if (p.d_c == 256) r64 ? launch_cfg<256, 64>(p, w, parts, stream) : launch_cfg<256, 32>(p, w, parts, stream);
  else r64 ? launch_cfg<512, 64>(p, w, parts, stream) : launch_cfg<512, 32>(p, w, parts, stream);
}

}  // namespace mla::kernels::fp8
