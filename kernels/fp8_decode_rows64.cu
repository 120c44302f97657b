// The FP8 split kernel for requests of more than 32 query rows (s_q H), in 64-row blocks; called
// by fp8_decode (kernels/fp8_decode.cu) between the scheduler and the combine.
//
// The narrow kernel's division of work (kernels/fp8_decode_narrow.cu) at 64 rows, so the S and
// softmax of tile i + 1 overlap the P.V of tile i, and no V^T goes through shared memory:
//   warpgroup 0: S [64 rows x 64 tokens] = Q8 K8^T + Q_rope K_rope^T (wgmma m64n64k32 e4m3 and
//        m64n64k16 bf16, Q and the tile from shared memory; rows are wgmma's M, so each thread
//        holds 2 rows x 16 tokens and the per-row work is amortised over 16 tokens), the online
//        softmax with s_k folded into P and P re-quantised per row and tile, P8^T and the rows'
//        rescale factors into one of two buffers;
//   warpgroups 1 and 2: O^T [d_c / 2 channels x 64 rows] = O^T gamma + V8^T P8^T (wgmma
//        m64n64k32 e4m3, A = V^T built in registers from the tile by ldmatrix.trans and byte
//        permutes, B = P^T), each owning d_c / 2 channels (fp8_decode_device.cuh:
//        vt_fragments_ldsm, pv_rescale, pv_mma_ks), one 32-token k-step's fragments at a time;
//   warpgroup 3: one thread issues the bulk copies into the stage ring (4 stages at d_c = 512).
// With an FP4 cache (the FP8-tensor-core route of the 4-bit decode, kernels/fp4_to_fp8.cuh) that
// thread copies FP4 tiles into a raw ring and warpgroups 1-2 rewrite each as the FP8 stage: after
// their P.V of tile it, tile it + kS into the stage it left, so warpgroup 0 finds each stage
// converted a whole ring ahead (converting before the P.V, one stage ahead, kept warpgroup 0
// waiting for the stage: 5-7% slower; docs/gpu-notes.md). Warpgroup 0 converts nothing: its S +
// softmax chain is the one the others wait on; warpgroup 3 has no registers to spare (24).
// Registers (setmaxnreg): 136 for warpgroup 0, 176 for each P.V warpgroup (128 accumulators; at
// 168 ptxas serialises their wgmmas), 24 for the producer: the 64K of the SM exactly.
// Numerics: the rounding points of the twin (quant/fp8_decode_twin) and of the narrow kernel:
// logits (s * s_k) * (q_scale scale log2e), P = exp2(x - m) s_k re-quantised per row and tile by
// sigma = amax / 448 (bounded below: quant::fp8_block_scale), O and l in units of the current sigma.
#include <cuda_fp8.h>

#include <climits>

#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/fp4_to_fp8.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_softmax_rows64.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/setmaxnreg.cuh"
#include "kernels/timeline.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::fp8 {
#ifdef MLA_TIMELINE
__device__ uint64_t g_rows64_timeline[timeline::kWarps * timeline::kEvents];
#endif
namespace {

constexpr int kThreads = 512, kConsumers = 384, kRows = 64;
// FP4: the converting threads (warpgroups 1-2), in shares of 64 (one token each).
constexpr int kConvFirst = 128, kConvShares = 4, kConvWarps = 2 * kConvShares;

template <int DC, int DR, bool FP4 = false>
struct RCfg {
  static constexpr int kNB = DC / 128;  // m64 channel blocks per P.V warpgroup (d_c / 2 channels)
  static constexpr int kRB = 2 * DR;    // rope row bytes
  static constexpr int kRMode = kRB == 128 ? 1 : 2;
  static constexpr uint32_t kRSbo = 8 * kRB;
  static constexpr uint32_t kStage = StageBytes<DC, DR>::kAligned;
  static constexpr uint32_t kQ8 = kRows * DC, kQR = kRows * kRB, kP = kRows * 128;
  static constexpr uint32_t kSmall = 4 * kRows * 4;  // gamma [2][64], fin [64][2] floats
  static constexpr size_t kFixed = 1024 + kQ8 + kQR + 2 * kP + kSmall;
  // FP8: as many stages as fit (each needs 16 bytes of barriers and 4 of valid count), at most 6.
  // FP4: raw FP4 tiles beside the FP8 stages; at d_c = 512 three FP8 stages and one raw stage fit
  // (the copy of tile i + 1 has the P.V of a tile to land in; two FP8 and three raw stages: 5-7%
  // slower).
  static constexpr uint32_t kRawStage = FP4 ? 64 * (DC / 2 + DC / 32 + 2 * DR) : 0;
  static constexpr int kR = FP4 ? (DC == 512 ? 1 : 4) : 0;
  static constexpr size_t kRawBytes = FP4 ? 128 + kR * (kRawStage + 20) : 0;
  static constexpr int kFit = static_cast<int>((detail::kMaxSmemPerBlock - kFixed - kRawBytes) / (kStage + 20));
  static constexpr int kS = FP4 ? (DC == 512 ? 3 : 4) : (kFit < 6 ? kFit : 6);
  static_assert(kS >= 2 && kS <= kFit, "fp8 64-row kernel: fewer than two ring stages fit");
  static constexpr size_t smem() { return kFixed + kS * (kStage + 20) + kRawBytes; }
  static_assert(smem() <= detail::kMaxSmemPerBlock, "fp8 64-row kernel: shared memory over the limit");
};

// Named barriers (id 0 is __syncthreads): warpgroup 0's query load; P^T buffer k full
// (warpgroup 0 arrives, 1-2 wait) and free (the reverse); the epilogue's 1/l and LSE (fin: warpgroup
// 0 arrives, 1-2 wait) and fin free again (1-2 arrive after a segment's store when another follows,
// warpgroup 0 waits before writing the next segment's fin).
constexpr int kBarQ = 1, kBarFull = 3, kBarFree = 5, kBarFin = 7, kBarFinFree = 8;

// Registers a thread (setmaxnreg): warpgroup 0 (S, softmax), each P.V warpgroup, the producer.
constexpr int kSoftmaxRegs = 136, kPvRegs = 176, kProducerRegs = 24;
static_assert(kSoftmaxRegs + 2 * kPvRegs + kProducerRegs <= detail::setmaxnreg_budget(kThreads),
              "setmaxnreg asks for more registers than the launch allocates");

template <int DC, int DR, bool FP4>
__global__ void __launch_bounds__(kThreads, 1)
    rows64_split_kernel(const quant::Fp8DecodeParams p, const int32_t* __restrict__ info,
                        const int32_t* __restrict__ offsets, float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = RCfg<DC, DR, FP4>;
  constexpr int S = C::kS;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ8 = base, sQR = sQ8 + C::kQ8, sSt = sQR + C::kQR, sP = sSt + S * C::kStage;
  const uint32_t sSmall = sP + 2 * C::kP;
  float* gam = reinterpret_cast<float*>(gbase + (sSmall - base));  // [2][64]
  float* fin = gam + 2 * kRows;                                     // [64][2]
  const uint32_t bar0 = sSmall + C::kSmall;  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const uint32_t sValid = bar0 + 16 * S;     // valid tokens of the tile in stage s (producer-written)
  // FP4 only: the raw ring (128-byte aligned), its full/empty barriers and valid counts.
  const uint32_t sRaw = (sValid + 4 * S + 127u) & ~127u;
  const uint32_t rbar = sRaw + C::kR * C::kRawStage, rValid = rbar + 16 * C::kR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  MLA_TL_INIT(g_rows64_timeline);
  // Every consumer warp releases a stage; the producer's expect_tx or each converting warp fills it.
  init_stage_ring(bar0, S, 12, FP4 ? kConvWarps : 1);
  if constexpr (FP4) init_stage_ring(rbar, C::kR, kConvWarps);  // the copying thread fills, the converters release
  const int32_t* in = info + blockIdx.y * quant::kPartInfoInts;  // grid: detail::split_grid
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * kRows;

  if (warp >= 12) {  // ---- producer ----
    detail::setmaxnreg_dec<kProducerRegs, kThreads>();
    if (warp == 12 && lane == 0) {
      if constexpr (FP4) Fp4RawProducer<DC, DR, C::kR>(p, in, sRaw, rbar, rValid).until(INT_MAX);
      else produce_tiles<DC, DR, S>(p, in, sSt, bar0, sValid);
    }
    return;
  }
  // Broadcast from lane 0 so ptxas knows the role is warp-uniform (an RS wgmma under a branch it
  // cannot prove uniform is serialised, C7520).
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0), wiw = warp % 4;
  const int g = lane / 4, tq = lane % 4;
  const float neg_inf = -__int_as_float(0x7f800000);
  if (wg > 0) {  // both P^T buffers start free
    detail::named_bar_arrive(kBarFree, kConsumers);
    detail::named_bar_arrive(kBarFree + 1, kConsumers);
  }
  // Each role walks the part's request segments. Warpgroup 0 alone reads the query (S): it loads
  // each segment's rows by cp.async, the first segment's before its loop, every later one's as
  // the segment before ends, and waits for them at the segment's start (warpgroups 1-2 are not
  // held at a segment boundary; docs/gpu-notes.md, session 14).
  int it = 0;
  if (wg == 0) {
    detail::setmaxnreg_inc<kSoftmaxRegs, kThreads>();
    if (detail::part_has_segment(in[0], in[1], end_b, end_t))
      issue_query<DC, DR, kRows>(p, in[0], rows, row0, sQ8, sQR, threadIdx.x, 128);
    for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
      const int L = p.seqlens[b];
      const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
      detail::cp_async_wait_all();  // this thread's chunks of the segment's query
      detail::fence_proxy_async();
      detail::named_bar_sync(kBarQ, 128);  // every chunk of it
      // ======== S, online softmax, P8^T ========
      int lrow[2], lim_off[2];
      float rowf[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        lrow[h] = 16 * wiw + g + 8 * h;
        const int r = row0 + lrow[h];
        lim_off[h] = p.s_q - 1 - min(r / p.heads, p.s_q - 1);
        rowf[h] = r < rows ? p.q_scale[static_cast<size_t>(b) * rows + r] * (p.scale * detail::kLog2e) : 0.f;
      }
      float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f}, sig[2] = {1.f, 1.f};
      const uint64_t dq = desc_sw(sQ8, 1024, 1), dqr = desc_sw(sQR, C::kRSbo, C::kRMode);
      // S of the tile in ring slot it_ into acc: waits for the tile, issues and commits the
      // wgmmas (the caller waits).
      auto issue_s = [&](float (&acc)[32], int it_) {
        const int stage = it_ % S;
        const uint32_t st = sSt + stage * C::kStage;
        detail::mbar_wait(bar0 + 8 * stage, (it_ / S) & 1);
        MLA_TL(1);  // the tile landed
        issue_s_rows64<DC, DR>(acc, dq, dqr, st);
      };
      // Softmax of tile ti_ (ring slot it_) from its finished S in sv; P8^T and gamma out.
      auto finish = [&](float (&sv)[32], int ti_, int it_) {
#pragma unroll
        for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
        const int stage = it_ % S;
        const uint32_t st = sSt + stage * C::kStage;
        const int j0 = ti_ * kT;
        float skv[16];
        int lim[2];
        softmax_inputs<DC, DR>(st, sValid + 4 * stage, j0, L, lim_off, tq, skv, lim);
        __syncwarp();  // then the stage is free for us
        if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
        // ---- online softmax, s_k folded into P, P re-quantised per row and tile ----
        float gamma[2], inv[2];
        MLA_TL(3);  // softmax inputs read, stage released
        softmax_tile_any(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gamma, inv);
        MLA_TL(4);  // softmax
        // ---- P8^T [row][token] (128-byte rows and swizzle) and gamma into buffer it_ & 1 ----
        const int pb = it_ & 1;
        detail::named_bar_sync(kBarFree + pb, kConsumers);  // P.V of tile it_ - 2 is done with buffer pb
        MLA_TL(5);  // P buffer free
        store_p8t_gamma(sv, inv, gamma, sP + pb * C::kP, gam + pb * kRows, lrow, tq);
        detail::fence_proxy_async();
        detail::named_bar_arrive(kBarFull + pb, kConsumers);
        MLA_TL(6);  // P handed over
      };
      // One tile at a time: S, then its softmax. (S of tile ti + 1 issued into a second
      // accumulator during tile ti's softmax was slower: ptxas serialises the wgmmas, C7514;
      // docs/gpu-notes.md.)
      for (int ti = t; ti < stop; ++ti) {
        float sv[32];
        MLA_TL(0);  // tile start
        issue_s(sv, it);
        gmma::wait<0>();
        MLA_TL(2);  // S done
        finish(sv, ti, it++);
      }
      if (detail::part_has_segment(b + 1, 0, end_b, end_t))  // the next segment's query: this one's S are done
        issue_query<DC, DR, kRows>(p, b + 1, rows, row0, sQ8, sQR, threadIdx.x, 128);
      // ---- epilogue: 1/l and lse = (m + log2(sigma l)) ln 2 of the thread's two rows ----
      if (b != in[0]) detail::named_bar_sync(kBarFinFree, kConsumers);  // warpgroups 1-2 stored the last segment
      write_fin(fin, lrow, m_run, l_run, sig, tq);
      detail::named_bar_arrive(kBarFin, kConsumers);
    }
    // the last phase of each buffer that warpgroups 1-2 opened
    detail::named_bar_sync(kBarFree, kConsumers);
    detail::named_bar_sync(kBarFree + 1, kConsumers);
  } else {
    detail::setmaxnreg_inc<kPvRegs, kThreads>();
    // FP4: tile i of the part from the raw ring into its FP8 stage: tiles 0 .. kS - 1 first, then
    // tile it + kS after the P.V of tile it (which both consumer roles have released by then).
    // (The converter made at each call, its offsets computed every tile: beside 128 accumulators
    // a converter kept through the loop spilled.)
    auto convert_tile = [&](int i) {
      if constexpr (FP4) {
        const Fp4TileConverter<DC, DR, kConvShares, false> conv(threadIdx.x & 63,
                                                                (static_cast<int>(threadIdx.x) - kConvFirst) / 64);
        convert_fp4_tile<S, C::kR>(conv, i, gbase + (sSt - base), C::kStage, bar0, sValid,
                                   gbase + (sRaw - base), rbar, rValid);
      }
    };
    const int fp4_tiles = FP4 ? part_tiles(p, in) : 0;
    if constexpr (FP4)
      for (int i = 0; i < S && i < fp4_tiles; ++i) convert_tile(i);
    int split = in[4];
    for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
      const int stop = (b == end_b) ? end_t : quant::decode_tiles(p.seqlens[b], kT);
      const int n_split = offsets[b + 1] - offsets[b];
      // ======== O^T[channels of this warpgroup] = O^T gamma + V8^T P8^T ========
      constexpr int NB = C::kNB;
      const int g0 = (wg - 1) * (DC / 32);  // the warpgroup's first 16-channel group (vt_fragments_ldsm)
      float acc[NB][kRows / 2];
#pragma unroll
      for (int mb = 0; mb < NB; ++mb)
#pragma unroll
        for (int i = 0; i < kRows / 2; ++i) acc[mb][i] = 0.f;
      for (int ti = t; ti < stop; ++ti, ++it) {
        const int stage = it % S;
        const uint32_t st = sSt + stage * C::kStage;
        MLA_TL(10);  // tile start
        detail::mbar_wait(bar0 + 8 * stage, (it / S) & 1);
        MLA_TL(11);  // the tile landed
        const int valid = static_cast<int>(lds32(sValid + 4 * stage));
        // One k-step's fragments at a time (16 registers: the accumulators take 128): the
        // second k-step's are built once the first's wgmmas are done, then the stage is free.
        uint32_t fr[NB][4];
        vt_fragments_ldsm<NB>(st, g0, wiw, lane, tq, valid, 0, fr);
        MLA_TL(12);  // V^T fragments of k-step 0
        const int pb = it & 1;
        const uint64_t dp = desc_sw(sP + pb * C::kP, 1024, 1);
        detail::named_bar_sync(kBarFull + pb, kConsumers);
        MLA_TL(13);  // P8 of the tile
        pv_rescale<NB, kRows, true>(acc, gam + pb * kRows, tq);
        MLA_TL(14);  // O rescaled
        gmma::fence();
        pv_mma_ks<NB, kRows>(acc, fr, dp);
        gmma::commit();
        gmma::wait<0>();
        pv_fence_acc<NB, kRows>(acc);
        MLA_TL(15);  // k-step 0's P.V done
        vt_fragments_ldsm<NB>(st, g0, wiw, lane, tq, valid, 1, fr);
        MLA_TL(16);  // V^T fragments of k-step 1
        __syncwarp();
        if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
        gmma::fence();
        pv_mma_ks<NB, kRows>(acc, fr, detail::gmma_desc_at(dp, 32));
        gmma::commit();
        gmma::wait<0>();
        pv_fence_acc<NB, kRows>(acc);
        MLA_TL(17);  // k-step 1's P.V done
        detail::named_bar_arrive(kBarFree + pb, kConsumers);
        if constexpr (FP4)  // into the stage this tile left
          if (it + S < fp4_tiles) convert_tile(it + S);
        MLA_TL(18);  // FP4: tile it + kS converted
      }
      // ---- store: bf16 output (one split) or the split's fp32 partial + LSE ----
      detail::named_bar_sync(kBarFin, kConsumers);
      store_pv_rows<DC, NB, kRows>(p, o_acc, lse_acc, b, split, n_split, rows, row0, g0, wiw, g, acc, fin, tq,
                    wg == 1 && wiw == 0 && g == 0);
      if (detail::part_has_segment(b + 1, 0, end_b, end_t)) detail::named_bar_arrive(kBarFinFree, kConsumers);  // fin read
    }
  }
}

template <int DC, int DR, bool FP4>
void launch_cfg(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  static cuda::SmemLimitSet smem_set;
  const size_t smem = RCfg<DC, DR, FP4>::smem();
  cuda::set_smem_limit_once(rows64_split_kernel<DC, DR, FP4>, smem, smem_set,
                            "fp8 64-row decode split kernel smem limit");
  const dim3 grid = detail::split_grid(parts, quant::fp8_decode_row_blocks(p));
  rows64_split_kernel<DC, DR, FP4><<<grid, kThreads, smem, stream>>>(p, w.info, w.offsets, w.o_acc, w.lse_acc);
  cuda::check(cudaGetLastError(), "fp8 64-row decode split launch", "mla decode");
}

template <int DR, bool FP4>
void launch_dc(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  if (p.d_c == 128) launch_cfg<128, DR, FP4>(p, w, parts, stream);
  else if (p.d_c == 256) launch_cfg<256, DR, FP4>(p, w, parts, stream);
  else launch_cfg<512, DR, FP4>(p, w, parts, stream);
}

}  // namespace

void launch_rows64(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream,
                   bool fp4_cache) {
  with_dr_and_format(p.d_r, fp4_cache, [&](auto dr, auto fp4) {
    launch_dc<decltype(dr)::value, decltype(fp4)::value>(p, w, parts, stream);
  });
}

#ifdef MLA_TIMELINE
void rows64_timeline(uint64_t* host, cudaStream_t stream) {
  timeline::transfer(g_rows64_timeline, host, stream, "fp8 64-row timeline");
}
#endif

}  // namespace mla::kernels::fp8
