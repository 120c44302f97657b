// The FP8 split kernel for requests of <= 32 query rows (s_q H: H <= 16 at s_q = 2, H <= 32 at
// s_q = 1), called by fp8_decode (kernels/fp8_decode.cu) after the scheduler's launch, or alone
// for a planned call (fp8_decode_plan): it quantises a BF16 query itself and merges the splits of
// each request in the CTA that finishes the last one (decode_store.cuh: take_merge_ticket,
// merge_request), so no combine launch follows.
//
// The 64-row kernel (fp8_decode_rows64.cu) puts query rows in wgmma's M (64 rows: 48 of them
// empty at H = 16). Here both products are transposed so the rows are wgmma's N (16 or 32):
//   S^T [64 tokens x N] = K8 Q8^T + K_rope Q_rope^T   A = the cache tile exactly as it lands (its
//                                                     rows are tokens, K-major), B = the query;
//   O^T [d_c x N] = O^T gamma + V8^T P8^T            A = V^T built in registers from the tile
//                                                     (4x4 byte transposes; each thread owns
//                                                     2 d_c / 128 contiguous channels, so its
//                                                     loads are 8-byte rows of the tile), B = P^T
//                                                     (N x 64 bytes in shared memory).
// Warp roles (512 threads): warpgroup 0 computes S^T, stages it through shared memory so each
// thread owns one query row and 64 / (128 / N) of its tokens, runs the online softmax there
// (row reductions over 128 / N lanes of one warp) and writes P8^T and the rows' rescale factors
// into one of two buffers. FP8 pages: two tiles a pass (S of both issued together, one S^T
// staging, their softmaxes in one pass, P8^T of both in one buffer, one hand-over); FP4 pages:
// one. Warpgroups 1 and 2 each own d_c / 2 output channels and, per tile,
// load their V^T fragments, release the ring stage, then run P.V when the pass's P^T arrives.
// So S + softmax of pass i+1 overlap P.V of pass i. Warpgroup 3: one thread issues
// the bulk copies into a 4-stage ring (6 at d_c <= 256): no V^T buffer, so the stages warpgroup 0's
// pass and the P.V warps do not hold are in flight.
// Numerics: the same rounding points as the 64-row kernel and the twin (quant/fp8_decode_twin):
// logits (s * s_k) * (q_scale scale log2e), P = exp2(x - m) s_k re-quantised per row and tile by
// sigma = amax / 448 (bounded below: quant::fp8_block_scale), O and l in units of the current sigma.
#include <cuda_fp8.h>

#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/fp4_to_fp8.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/setmaxnreg.cuh"
#include "kernels/timeline.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::fp8 {
#ifdef MLA_TIMELINE
// kernels/timeline.cuh's events of this kernel (ids in tools/mla-bench/timeline.py, fp8-narrow).
__device__ uint64_t g_narrow_timeline[timeline::kWarps * timeline::kEvents];
#endif
namespace {

constexpr int kNThreads = 512;

// FP4: the cache holds FP4 pages (docs/formats/kv-fp4.md); one thread of warpgroup 3 copies each
// tile into a raw ring of kR FP4 tiles and warpgroups 1-3 convert it into the FP8 stage
// (kernels/fp4_to_fp8.cuh), the P.V warps tile it + kConvAhead before their work on tile it.
// (Warpgroup 3 alone converted at ~0.3 instructions per cycle, the route's limit; warpgroup 0 is
// kept out: the P.V warps wait on its S + softmax chain. docs/gpu-notes.md, fifth session.) The
// raw ring is what keeps HBM busy (kR - 1 tiles in flight while one is converted; with 2 the
// route ran at 0.70x FlashMLA, bytes-in-flight-bound), so at d_c = 512 it gets the room of FP8
// stages.
template <int DC, int DR, int N, bool FP4 = false>
struct NCfg {
  static constexpr int kNB = DC / 128;           // m64 channel blocks per P.V warpgroup (d_c / 2 channels)
  // Ring stages. FP4 at d_c = 512: three FP8 stages, so the P.V warps convert two tiles ahead,
  // and the raw stages that fit beside them (three at 16 rows, two at 32).
  static constexpr int kS = FP4 ? (DC == 512 ? 3 : 4) : (DC == 512 ? 4 : 6);
  static constexpr int kR = FP4 ? (DC == 512 ? (N == 16 ? 3 : 2) : 4) : 0;  // raw FP4 stages
  static constexpr int kConvAhead = kS - 1;  // FP4: tiles the consumers convert ahead of the one they use
  // Tiles a softmax pass of warpgroup 0: two for FP8 pages (one S wait, S^T barrier and P
  // hand-over a pass, not a tile; -6 to -8% at 32 rows, docs/gpu-notes.md session 22). FP4 pages:
  // one (the P.V warps' conversion is that route's chain, and two spilled at 152 registers).
  static constexpr int kPass = FP4 ? 1 : 2;
  static_assert(kConvAhead >= 1, "fp8 narrow kernel: the FP4 converters need a stage ahead");
  static constexpr uint32_t kRawStage = 64 * (DC / 2 + DC / 32 + 2 * DR);
  static constexpr int kRB = 2 * DR;             // rope row bytes
  static constexpr int kRMode = kRB == 128 ? 1 : 2;
  static constexpr uint32_t kRSbo = 8 * kRB;
  static constexpr uint32_t kStage = StageBytes<DC, DR>::kAligned;
  static constexpr uint32_t kQ8 = N * DC, kQR = N * kRB, kP = N * 128;
  static constexpr int kSRow = 68;  // S^T staging row (floats): 64 tokens + 4, conflict-free stores
  static constexpr uint32_t kSS = N * kSRow * 4;
  // gamma [2][kPass][N], fin [N][2], the query rows' scales [N], the merged rows' LSE [N] floats; the
  // ticket's flag and the two requests to merge (+ padding)
  static constexpr uint32_t kSmall = (2 * kPass * N + 2 * N + N + N) * 4 + 16;
  // + full/empty barriers and each stage's valid token count
  static constexpr size_t smem() {
    return 1024 + kQ8 + kQR + kS * kStage + 2 * kP + 2 * kSS + kSmall + 16 * kS + 4 * kS + kR * kRawStage + 128 + 16 * kR +
           4 * kR;
  }
  static_assert(smem() <= detail::kMaxSmemPerBlock, "fp8 narrow kernel: shared memory over the limit");
};

// Named barriers (id 0 is __syncthreads): all consumers around the query load; warpgroup 0's
// S^T staging; P^T buffer k full (warpgroup 0 arrives, 1-2 wait) and free (the
// reverse); the epilogue's 1/l and LSE; the fused merge's ticket (warpgroups 1-2) and the
// merge itself (all consumers).
constexpr int kBarQ = 1, kBarStage = 2, kBarFull = 3, kBarFree = 5, kBarFin = 7, kBarTicket = 8, kBarMerge = 9;
constexpr int kConsumers = 384;
// FP4: the converting threads (warpgroups 1-3), in shares of 64 (one token each).
constexpr int kConvFirst = 128, kConvShares = (kNThreads - kConvFirst) / 64, kConvWarps = 2 * kConvShares;

// Registers a thread (setmaxnreg), consumers (warpgroups 0-2) and warpgroup 3: FP8 pages 160 and
// 24 (the producer thread), FP4 pages 152 and 56 (warpgroup 3 converts a share).
constexpr int kConsumerRegs = 160, kProducerRegs = 24, kFp4ConsumerRegs = 152, kConverterRegs = 56;
static_assert(3 * kConsumerRegs + kProducerRegs <= detail::setmaxnreg_budget(kNThreads) &&
                  3 * kFp4ConsumerRegs + kConverterRegs <= detail::setmaxnreg_budget(kNThreads),
              "setmaxnreg asks for more registers than the launch allocates");

template <int DC, int DR, int N, bool FP4>
__global__ void __launch_bounds__(kNThreads, 1)
    narrow_split_kernel(const quant::Fp8DecodeParams p, const QuerySrc qsrc, const int32_t* __restrict__ info,
                        const int32_t* __restrict__ offsets, float* __restrict__ o_acc, float* __restrict__ lse_acc,
                        int32_t* merge_cnt) {
  using C = NCfg<DC, DR, N, FP4>;
  constexpr int kPass = C::kPass;
  constexpr int S = C::kS, NC = N / 4;  // NC: query rows per thread in an m64nN accumulator
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ8 = base, sQR = sQ8 + C::kQ8, sSt = sQR + C::kQR, sP = sSt + S * C::kStage;
  float* sS = reinterpret_cast<float*>(gbase + (sP + 2 * C::kP - base));  // [2][N][kSRow]
  const uint32_t sSmall = sP + 2 * C::kP + 2 * C::kSS;
  float* gam = reinterpret_cast<float*>(gbase + (sSmall - base));
  float* fin = gam + 2 * C::kPass * N;
  float* qs = fin + 2 * N;                                   // the query rows' scales (qsrc.bf16 only)
  float* merge_lse = qs + N;                                 // the merged rows' LSE
  volatile int* merge_flag = reinterpret_cast<int*>(merge_lse + N);  // [0] the ticket, [1..2] the requests to merge
  const uint32_t bar0 = sSmall + C::kSmall;  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const uint32_t sValid = bar0 + 16 * S;     // valid tokens of the tile in stage s (producer-written)
  // FP4 only: the raw ring (128-byte aligned), its full/empty barriers and valid counts.
  const uint32_t sRaw = (sValid + 4 * S + 127u) & ~127u;
  const uint32_t rbar = sRaw + C::kR * C::kRawStage, rValid = rbar + 16 * C::kR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  MLA_TL_INIT(g_narrow_timeline);
  // Every consumer warp releases a stage; the producer's expect_tx or each converting warp fills it.
  init_stage_ring(bar0, S, 12, FP4 ? kConvWarps : 1);
  if constexpr (FP4) init_stage_ring(rbar, C::kR, kConvWarps);  // the copying thread fills, the converters release
  const int32_t* in = info + blockIdx.x * quant::kPartInfoInts;
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  // FP4: warpgroups 1-3 convert a share of each tile each (fp4_to_fp8.cuh; warpgroup 0, whose
  // S + softmax chain the P.V warps wait on, does not): the P.V warps tile it + kConvAhead before
  // their work on tile it (the stage it reuses, it + kConvAhead - kS = it - 1, is released by
  // then), warpgroup 3 every tile in turn.
  // The thread's converter (its offsets in both tiles) is made where its loop starts, so its
  // registers are not live through the other roles' code (made before the role split, they spilled).
  using Conv = Fp4TileConverter<DC, DR, kConvShares>;
  auto make_conv = [&] { return Conv(threadIdx.x & 63, (static_cast<int>(threadIdx.x) - kConvFirst) / 64); };
  auto convert_tile = [&](const Conv& conv, int i) {
    if constexpr (FP4)  // (instantiated only with the FP4 ring: its stage counts are 0 otherwise)
      convert_fp4_tile<S, C::kR>(conv, i, gbase + (sSt - base), C::kStage, bar0, sValid,
                                 gbase + (sRaw - base), rbar, rValid);
  };
  // The converting warps' tile count. Computed by warpgroup 0 too: under a warp-dependent
  // condition ptxas serialised the P.V warpgroups' wgmmas (C7520).
  const int fp4_tiles = FP4 ? part_tiles(p, in) : 0;

  if (warp >= 12) {  // ---- producer (FP8 cache) or copier + a third of the converters (FP4 cache) ----
    if constexpr (FP4) {
      detail::setmaxnreg_dec<kConverterRegs, kNThreads>();
      Fp4RawProducer<DC, DR, C::kR> prod(p, in, sRaw, rbar, rValid);
      const Conv conv = make_conv();
      for (int i = 0; i < fp4_tiles; ++i) {
        MLA_TL(20);
        if (threadIdx.x == 384) prod.until(i + C::kR);
        __syncwarp();  // reconverge the copying warp, or it converts the tile twice (31 lanes, then 1)
        MLA_TL(21);
        convert_tile(conv, i);
        MLA_TL(22);
      }
    } else {
      detail::setmaxnreg_dec<kProducerRegs, kNThreads>();
      if (warp == 12 && lane == 0) produce_tiles<DC, DR, S>(p, in, sSt, bar0, sValid);
    }
    return;
  }
  if constexpr (FP4)
    detail::setmaxnreg_inc<kFp4ConsumerRegs, kNThreads>();
  else
    detail::setmaxnreg_inc<kConsumerRegs, kNThreads>();
  // Broadcast from lane 0 so ptxas knows the role is warp-uniform: an RS wgmma under a branch
  // it cannot prove uniform is serialised (C7520).
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0), wiw = warp % 4;
  const int g = lane / 4, tq = lane % 4;
  const float neg_inf = -__int_as_float(0x7f800000);
  if (wg > 0) {  // both P^T buffers start free
    detail::named_bar_arrive(kBarFree, kConsumers);
    detail::named_bar_arrive(kBarFree + 1, kConsumers);
  }
  if constexpr (FP4)
    if (wg > 0) {
      const Conv conv = make_conv();
      for (int i = 0; i < C::kConvAhead && i < fp4_tiles; ++i) convert_tile(conv, i);
    }
  int split = in[4];
  int it = 0, pass = 0;  // running tile and softmax pass (P^T buffer pass & 1)
  int merge_b0 = -1, merge_b1 = -1;  // the requests this CTA merges (warpgroups 1-2)
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
    const int n_split = offsets[b + 1] - offsets[b];
    detail::named_bar_sync(kBarQ, kConsumers);  // warpgroup 0 is done with the previous query
    if (qsrc.bf16 != nullptr)  // quantised here (the first split also fills the workspace copy)
      quantize_query_smem<DC, DR, N>(qsrc, b, rows, sQ8, sQR, qs, warp, kConsumers / 32, lane, split == offsets[b]);
    else
      load_query<DC, DR, N>(p, b, rows, 0, sQ8, sQR, threadIdx.x, kConsumers);
    detail::named_bar_sync(kBarQ, kConsumers);
    if (wg == 0) {
      // ======== S^T, online softmax, P8^T ========
      // After the S wgmma, S^T goes through shared memory so that each thread then owns one
      // query row n and TPT contiguous tokens of it: the per-row work (reductions over LPR lanes
      // of one warp, two divisions, one exp2) is done once per thread, not once per accumulator
      // column (N / 4 of them), and P^T leaves as one TPT-byte store.
      constexpr int LPR = 128 / N, TPT = 64 / LPR;
      const int n = threadIdx.x / LPR, q = threadIdx.x % LPR, tok0 = q * TPT;
      const float qsn = qsrc.bf16 != nullptr ? qs[n] : (n < rows ? p.q_scale[static_cast<size_t>(b) * rows + n] : 0.f);
      const float rowf = n < rows ? qsn * (p.scale * detail::kLog2e) : 0.f;
      const int lim_off = p.s_q - 1 - min(n / p.heads, p.s_q - 1);
      float m_run = neg_inf, l_run = 0.f, sig = 1.f;
      const int m0 = 16 * wiw + g;  // the accumulator's tokens of this thread: m0, m0 + 8
      // S of running tile i2 into acc: waits for its stage, issues the wgmmas and commits them
      // (the caller waits).
      auto issue_s = [&](int i2, float (&acc)[N / 2]) {
        const int stage = i2 % S;
        const uint32_t st = sSt + stage * C::kStage;
        detail::mbar_wait(bar0 + 8 * stage, (i2 / S) & 1);
        MLA_TL(1);
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
          acc[i] = 0.f;
          gmma::fence_operand(acc[i]);
        }
        // descriptors: one base each, k-steps by constant adds (detail::gmma_desc_at)
        const uint64_t dt = desc_sw(st, 1024, 1), dq = desc_sw(sQ8, 1024, 1);
        const uint64_t dtr = desc_sw(st + 64 * DC, C::kRSbo, C::kRMode), dqr = desc_sw(sQR, C::kRSbo, C::kRMode);
        gmma::fence();
#pragma unroll
        for (int kk = 0; kk < DC / 32; ++kk) {
          const uint32_t kb = kk * 32;
          ss_e4m3_narrow<N>(acc, detail::gmma_desc_at(dt, (kb >> 7) * 8192 + (kb & 127)),
                            detail::gmma_desc_at(dq, (kb >> 7) * (N * 128) + (kb & 127)));
        }
#pragma unroll
        for (int kk = 0; kk < DR / 16; ++kk)
          ss_bf16_narrow<N>(acc, detail::gmma_desc_at(dtr, kk * 32), detail::gmma_desc_at(dqr, kk * 32));
        gmma::commit();
      };
      // S^T of the pass's tile in slot s (its wgmmas done) into staging buffer s as [n][token]
      // (rows of kSRow floats: conflict-free stores). The buffer's readers of the last pass have
      // all passed that pass's P-free barrier.
      auto stage_st = [&](float (&acc)[N / 2], int s) {
#pragma unroll
        for (int i = 0; i < N / 2; ++i) gmma::fence_operand(acc[i]);
        float* ss = sS + s * N * C::kSRow;
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
          for (int h = 0; h < 2; ++h) ss[acc_col(c, tq) * C::kSRow + m0 + 8 * h] = acc[acc_reg(c, h)];
      };
      // The softmax of a pass's NP tiles (ti, ti + 1; running it, it + 1), S^T staged: the
      // tiles' reductions and exp2s interleave, while the running state (m, alpha, sigma, l) is
      // chained tile by tile in the twin's order. Products and sums the twin rounds one by one
      // are written as _rn intrinsics: left to contraction, ptxas fused them differently in one-
      // and two-tile passes, and the FP4 route (one) then differed from FP8 pages (two) in the
      // last bit. The exp2 is not under `live` (a dead token's x is -inf, so its exp2 is 0): under
      // the condition each token's exp2f was a branch in the PTX, which ptxas turned into
      // predicated code (predicate logic a token) beside exp2f's range fix-up; with the exp2
      // unconditional and ex2.approx.ftz, the loop of two tiles is 938 SASS instructions, was 1,281.
      auto finish_pass = [&](auto np_c, int ti) {
        constexpr int NP = decltype(np_c)::value;
        float x[NP][TPT], skv[NP][TPT];
        int lim[NP];
        detail::named_bar_sync(kBarStage, 128);
        MLA_TL(3);
#pragma unroll
        for (int s = 0; s < NP; ++s) {
          const int stage = (it + s) % S;
          const uint32_t st = sSt + stage * C::kStage;
          const float* ss = sS + s * N * C::kSRow;
          const float* skp = reinterpret_cast<const float*>(gbase + (st - base) + 64 * (DC + C::kRB));
          lim[s] = min(L - lim_off, (ti + s) * kT + static_cast<int>(lds32(sValid + 4 * stage)));
#pragma unroll
          for (int i = 0; i < TPT; i += 4) {
            const float4 a = *reinterpret_cast<const float4*>(ss + n * C::kSRow + tok0 + i);
            const float4 k = *reinterpret_cast<const float4*>(skp + tok0 + i);
            x[s][i] = a.x, x[s][i + 1] = a.y, x[s][i + 2] = a.z, x[s][i + 3] = a.w;
            skv[s][i] = k.x, skv[s][i + 1] = k.y, skv[s][i + 2] = k.z, skv[s][i + 3] = k.w;
          }
        }
        __syncwarp();
        if (lane == 0)  // S and s_k read: the stages are free for us
#pragma unroll
          for (int s = 0; s < NP; ++s) detail::mbar_arrive(bar0 + 8 * (S + (it + s) % S));
        // ---- online softmax of row n over the pass's tiles, s_k folded into P, P re-quantised ----
        float tmax[NP], amax[NP], psum[NP], alpha[NP], m_use[NP], inv[NP], gamma[NP];
        // Each tile's v over the row's LPR lanes, the tiles' shuffles interleaved.
        auto row_max = [&](float (&v)[NP]) {
#pragma unroll
          for (int o = 1; o < LPR; o *= 2)
#pragma unroll
            for (int s = 0; s < NP; ++s) v[s] = fmaxf(v[s], __shfl_xor_sync(0xffffffffu, v[s], o));
        };
#pragma unroll
        for (int s = 0; s < NP; ++s) {
          const int j0 = (ti + s) * kT;
          tmax[s] = neg_inf;
#pragma unroll
          for (int i = 0; i < TPT; ++i) {
            x[s][i] = (j0 + tok0 + i < lim[s]) ? __fmul_rn(__fmul_rn(x[s][i], skv[s][i]), rowf) : neg_inf;
            tmax[s] = fmaxf(tmax[s], x[s][i]);
          }
        }
        row_max(tmax);
#pragma unroll
        for (int s = 0; s < NP; ++s) {  // the running maximum, tile by tile
          const float m_new = fmaxf(m_run, tmax[s]);
          m_use[s] = (m_new == neg_inf) ? 0.f : m_new;
          alpha[s] = detail::ex2_ftz(m_run - m_use[s]);
          m_run = m_new;
        }
#pragma unroll
        for (int s = 0; s < NP; ++s) {
          const int j0 = (ti + s) * kT;
          psum[s] = 0.f, amax[s] = 0.f;
#pragma unroll
          for (int i = 0; i < TPT; ++i) {
            const bool live = j0 + tok0 + i < lim[s];
            const float pv = detail::ex2_ftz(__fsub_rn(x[s][i], m_use[s]));  // 0 where not live (x = -inf)
            psum[s] += pv;
            const float pp = live ? pv * skv[s][i] : 0.f;
            amax[s] = fmaxf(amax[s], pp);
            x[s][i] = pp;
          }
        }
        row_max(amax);
#pragma unroll
        for (int s = 0; s < NP; ++s) {  // sigma and l, tile by tile
          const float sg = quant::fp8_block_scale(amax[s], sig);
          inv[s] = 1.f / sg;
          gamma[s] = alpha[s] * (sig * inv[s]);
          l_run = __fadd_rn(__fmul_rn(l_run, gamma[s]), __fmul_rn(psum[s], inv[s]));
          sig = sg;
        }
        uint32_t pw[NP][TPT / 4];
#pragma unroll
        for (int s = 0; s < NP; ++s) {
#pragma unroll
          for (int i = 0; i < TPT / 4; ++i)
            pw[s][i] = pack_e4m3(x[s][4 * i] * inv[s], x[s][4 * i + 1] * inv[s], x[s][4 * i + 2] * inv[s],
                                 x[s][4 * i + 3] * inv[s]);
          // Into vt_fragments_ldsm's k order (p8t_k: k = 4 a + 2 m + e holds token 8 m + 2 a + e of
          // each 16-token half). 16 tokens a thread: four byte permutes. 8: the thread of the
          // half's other 8 tokens is lane ^ 1; each stores half of the half's 16 k bytes at its
          // own offset.
          if constexpr (TPT == 16) {
            const uint32_t w0 = pw[s][0], w1 = pw[s][1], w2 = pw[s][2], w3 = pw[s][3];
            pw[s][0] = __byte_perm(w0, w2, 0x5410);
            pw[s][1] = __byte_perm(w0, w2, 0x7632);
            pw[s][2] = __byte_perm(w1, w3, 0x5410);
            pw[s][3] = __byte_perm(w1, w3, 0x7632);
          } else {
            const bool hi = q & 1;  // tokens 8 .. 15 of the half
            const uint32_t x2 = __shfl_xor_sync(0xffffffffu, hi ? pw[s][0] : pw[s][1], 1);
            const uint32_t lo = hi ? x2 : pw[s][0], up = hi ? pw[s][1] : x2;  // tokens (0-3, 8-11) or (4-7, 12-15)
            pw[s][0] = __byte_perm(lo, up, 0x5410);
            pw[s][1] = __byte_perm(lo, up, 0x7632);
          }
        }
        // P^T buffer pb: row n's 128 bytes hold the pass's tiles side by side (tile s in bytes
        // 64 s .. 64 s + 63: 16-byte chunks 4 s + tok0 / 16, 128-byte swizzled).
        const int pb = pass & 1;
        MLA_TL(4);
        detail::named_bar_sync(kBarFree + pb, kConsumers);  // P.V of pass - 2 is done with buffer pb
        MLA_TL(5);
#pragma unroll
        for (int s = 0; s < NP; ++s) {
          const uint32_t pa = sP + pb * C::kP + n * 128 + ((((tok0 >> 4) + 4 * s) ^ (n & 7)) << 4) + (tok0 & 15);
          if constexpr (TPT == 8) {
            asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(pa), "r"(pw[s][0]), "r"(pw[s][1]) : "memory");
          } else {
            detail::st_shared_v4(pa, make_uint4(pw[s][0], pw[s][1], pw[s][2], pw[s][3]));
          }
          if (q == 0) gam[(pb * kPass + s) * N + n] = gamma[s];
        }
        detail::fence_proxy_async();
        detail::named_bar_arrive(kBarFull + pb, kConsumers);
        MLA_TL(6);
        it += NP;
        ++pass;
      };
      // A pass: S of its tiles issued together (two accumulator sets), waited for once, staged,
      // then the softmax over both. FP4 pages: one tile a pass (its P.V warps convert; the
      // conversion is their chain, not this one).
      float sa[N / 2], sb[N / 2];
      int ti = t;
      if constexpr (kPass == 2) {
        for (; ti + 1 < stop; ti += 2) {
          MLA_TL(0);
          issue_s(it, sa);
          issue_s(it + 1, sb);
          gmma::wait<0>();
          MLA_TL(2);
          stage_st(sa, 0);
          stage_st(sb, 1);
          finish_pass(std::integral_constant<int, 2>{}, ti);
        }
      }
      for (; ti < stop; ++ti) {
        MLA_TL(0);
        issue_s(it, sa);
        gmma::wait<0>();
        MLA_TL(2);
        stage_st(sa, 0);
        finish_pass(std::integral_constant<int, 1>{}, ti);
      }
      // ---- epilogue: 1/l and lse = (m + log2(sigma l)) ln 2 of row n ----
#pragma unroll
      for (int o = 1; o < LPR; o *= 2) l_run += __shfl_xor_sync(0xffffffffu, l_run, o);
      if (q == 0) {
        const bool empty = l_run == 0.f;
        fin[2 * n] = empty ? 0.f : 1.f / l_run;
        fin[2 * n + 1] = empty ? neg_inf : (m_run + log2f(sig * l_run)) * detail::kLn2;
      }
      detail::named_bar_arrive(kBarFin, kConsumers);
    } else {
      // ======== O^T[channels of this warpgroup] = O^T gamma + V8^T P8^T ========
      constexpr int NB = C::kNB;
      const int g0 = (wg - 1) * (DC / 32);  // the warpgroup's first 16-channel group (vt_fragments_ldsm)
      float acc[NB][N / 2];
#pragma unroll
      for (int mb = 0; mb < NB; ++mb)
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc[mb][i] = 0.f;
      const Conv conv = make_conv();  // (a segment's; dead code for an FP8 cache)
      for (int ti = t; ti < stop; ++ti, ++it) {
        MLA_TL(10);
        if constexpr (FP4)
          if (it + C::kConvAhead < fp4_tiles) convert_tile(conv, it + C::kConvAhead);
        MLA_TL(11);
        // the tile's slot in warpgroup 0's pass (passes pair the request's tiles from t on)
        const int slot = (ti - t) % kPass;
        const bool pass_end = slot == kPass - 1 || ti + 1 == stop;
        const int stage = it % S;
        const uint32_t st = sSt + stage * C::kStage;
        detail::mbar_wait(bar0 + 8 * stage, (it / S) & 1);
        MLA_TL(12);
        const int valid = static_cast<int>(lds32(sValid + 4 * stage));
        uint32_t fr[2][NB][4];
        vt_fragments_ldsm<NB>(st, g0, wiw, lane, tq, valid, 0, fr[0]);
        vt_fragments_ldsm<NB>(st, g0, wiw, lane, tq, valid, 1, fr[1]);
        __syncwarp();
        if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
        MLA_TL(13);
        const int pb = pass & 1;
        if (slot == 0) detail::named_bar_sync(kBarFull + pb, kConsumers);
        MLA_TL(14);
        pv_rescale<NB, N>(acc, gam + (pb * kPass + slot) * N, tq);
        gmma::fence();
        const uint32_t sp = sP + pb * C::kP + 64 * slot;
        pv_mma_ks<NB, N>(acc, fr[0], desc_sw(sp, 1024, 1));
        pv_mma_ks<NB, N>(acc, fr[1], desc_sw(sp + 32, 1024, 1));
        gmma::commit();
        gmma::wait<0>();
        MLA_TL(15);
        pv_fence_acc<NB, N>(acc);
        if (pass_end) {
          detail::named_bar_arrive(kBarFree + pb, kConsumers);
          ++pass;
        }
      }
      // ---- store: bf16 output (one split) or the split's fp32 partial + LSE ----
      detail::named_bar_sync(kBarFin, kConsumers);
      store_pv_rows<DC, NB, N>(p, o_acc, lse_acc, b, split, n_split, rows, 0, g0, wiw, g, acc, fin, tq,
                    wg == 1 && wiw == 0 && g == 0);
      // A part holds at most two requests of several splits (its first and its last): their
      // merges wait for the end of the tile loop.
      if (n_split > 1 &&
          detail::take_merge_ticket(merge_cnt, b, n_split, threadIdx.x - 128, 256, kBarTicket, merge_flag)) {
        if (merge_b0 < 0) merge_b0 = b;
        else merge_b1 = b;
      }
    }
  }
  if (wg == 0) {  // the last phase of each buffer that warpgroups 1-2 opened
    detail::named_bar_sync(kBarFree, kConsumers);
    detail::named_bar_sync(kBarFree + 1, kConsumers);
  } else if (threadIdx.x == 128) {
    merge_flag[1] = merge_b0;
    merge_flag[2] = merge_b1;
  }
  detail::named_bar_sync(kBarMerge, kConsumers);  // every consumer merges the requests warpgroups 1-2 won
  const int m0 = merge_flag[1], m1 = merge_flag[2];
  if (m0 >= 0)
    detail::merge_request<DC, N, kConsumers>(p, o_acc, lse_acc, offsets, m0, rows, 0, threadIdx.x, merge_lse, kBarMerge);
  if (m1 >= 0)
    detail::merge_request<DC, N, kConsumers>(p, o_acc, lse_acc, offsets, m1, rows, 0, threadIdx.x, merge_lse, kBarMerge);
}

template <int DC, int DR, int N, bool FP4>
void launch_cfg(const quant::Fp8DecodeParams& p, const NarrowExtras& x, const detail::Workspace& w, int parts,
                cudaStream_t stream) {
  static cuda::SmemLimitSet smem_set;
  const size_t smem = NCfg<DC, DR, N, FP4>::smem();
  cuda::set_smem_limit_once(narrow_split_kernel<DC, DR, N, FP4>, smem, smem_set,
                            "fp8 narrow decode split kernel smem limit");
  narrow_split_kernel<DC, DR, N, FP4><<<dim3(parts, 1), kNThreads, smem, stream>>>(p, x.query, w.info, w.offsets,
                                                                                   w.o_acc, w.lse_acc, x.merge_cnt);
  cuda::check(cudaGetLastError(), "fp8 narrow decode split launch", "mla decode");
}

template <int DC, int DR, bool FP4>
void launch_n(const quant::Fp8DecodeParams& p, const NarrowExtras& x, const detail::Workspace& w, int parts,
              cudaStream_t stream) {
  if (p.s_q * p.heads <= 16) launch_cfg<DC, DR, 16, FP4>(p, x, w, parts, stream);
  else launch_cfg<DC, DR, 32, FP4>(p, x, w, parts, stream);
}

template <int DR, bool FP4>
void launch_dc(const quant::Fp8DecodeParams& p, const NarrowExtras& x, const detail::Workspace& w, int parts,
               cudaStream_t stream) {
  if (p.d_c == 128) launch_n<128, DR, FP4>(p, x, w, parts, stream);
  else if (p.d_c == 256) launch_n<256, DR, FP4>(p, x, w, parts, stream);
  else launch_n<512, DR, FP4>(p, x, w, parts, stream);
}

}  // namespace

#ifdef MLA_TIMELINE
void narrow_timeline(uint64_t* host, cudaStream_t stream) {
  timeline::transfer(g_narrow_timeline, host, stream, "fp8 narrow timeline");
}
#endif

void launch_narrow(const quant::Fp8DecodeParams& p, const NarrowExtras& x, const detail::Workspace& w, int parts,
                   cudaStream_t stream, bool fp4_cache) {
  with_dr_and_format(p.d_r, fp4_cache, [&](auto dr, auto fp4) {
    launch_dc<decltype(dr)::value, decltype(fp4)::value>(p, x, w, parts, stream);
  });
}

}  // namespace mla::kernels::fp8
