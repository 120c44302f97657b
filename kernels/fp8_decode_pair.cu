// The FP8 split kernel for the TPLA slices (d_c <= 256) at more than 64 query rows (s_q H), in
// 128-row blocks: the BF16 TPLA kernel's arrangement (kernels/decode_manyhead_v7.cu) on FP8
// tensor cores; called by fp8_decode (kernels/fp8_decode.cu) between the scheduler and the
// combine.
//
// Each consumer warpgroup owns 64 rows and all d_c channels and runs its rows' whole chain:
//   S [64 rows x 64 tokens] = Q8 K8^T + Q_rope K_rope^T (wgmma m64n64k32 e4m3 and m64n64k16 bf16,
//        as the 64-row kernel's warpgroup 0), the online softmax with s_k folded into P and P
//        re-quantised per row and tile (kernels/fp8_softmax_rows64.cuh), P8^T into its buffer;
//   O^T [d_c x 64 rows] = O^T gamma + V8^T P8^T with V^T built in registers
//        (kernels/fp8_decode_device.cuh: vt_fragments_ldsm, pv_rescale, pv_mma_ks), d_c / 64
//        channel blocks; the tile's stage is released once its V^T fragments are in registers.
// The two warpgroups take turns on the tensor cores (two named barriers): P.V of tile i and S
// of tile i + 1 go out back to back behind one wait, then the softmax of tile i + 1 runs under
// the other warpgroup's wgmmas. One tile feeds 128 rows, so a TPLA rank reads its cache slice
// once per 128 rows (the 64-row kernel: once per 64, with one warpgroup's S + softmax chain per
// tile). Warpgroup 2: one thread issues the bulk copies (produce_tiles).
// Registers (setmaxnreg): 240 per consumer (d_c = 256: 128 accumulators, 32 of V^T fragments, S
// in flight during P.V), 24 for the producer.
// Numerics: per row the 64-row kernel's (same tiles and rounding points), i.e. the twin's.
#include <cuda_fp8.h>

#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_softmax_rows64.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/setmaxnreg.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::fp8 {
namespace {

constexpr int kThreads = 384, kConsumers = 256, kRows = 64;  // kRows: rows per warpgroup

template <int DC, int DR>
struct PCfg {
  static constexpr int kNB = DC / 64;  // m64 channel blocks: all of d_c
  static constexpr int kRB = 2 * DR;   // rope row bytes
  static constexpr int kRMode = kRB == 128 ? 1 : 2;
  static constexpr uint32_t kRSbo = 8 * kRB;
  static constexpr uint32_t kStage = StageBytes<DC, DR>::kAligned;
  // Per warpgroup: Q8, Q_rope, P8^T (128-byte rows), gamma [64] and fin [64][2] floats.
  static constexpr uint32_t kQ8 = kRows * DC, kQR = kRows * kRB, kP = kRows * 128, kSmall = 3 * kRows * 4;
  static constexpr size_t kFixed = 1024 + 2 * (kQ8 + kQR + kP + kSmall);
  // As many stages as fit (each needs 16 bytes of barriers and 4 of valid count), at most 6.
  static constexpr int kFit = static_cast<int>((detail::kMaxSmemPerBlock - kFixed) / (kStage + 20));
  static constexpr int kS = kFit < 6 ? kFit : 6;
  static_assert(kS >= 2, "fp8 pair kernel: fewer than two ring stages fit");
  static constexpr size_t smem() { return kFixed + kS * (kStage + 20); }
};

// Named barriers (id 0 is __syncthreads), each + the warpgroup: its query load, its P^T and
// gamma written (and the epilogue's 1/l and LSE), its turn on the tensor cores.
constexpr int kBarQ = 1, kBarP = 3, kBarTurn = 5;

// Registers a thread (setmaxnreg): the producer warpgroup, each of the two consumer warpgroups.
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(kProducerRegs + 2 * kConsumerRegs <= detail::setmaxnreg_budget(kThreads),
              "setmaxnreg asks for more registers than the launch allocates");

template <int DC, int DR>
__global__ void __launch_bounds__(kThreads, 1)
    pair_split_kernel(const quant::Fp8DecodeParams p, const int32_t* __restrict__ info,
                      const int32_t* __restrict__ offsets, float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = PCfg<DC, DR>;
  constexpr int S = C::kS, NB = C::kNB;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ8 = base, sQR = sQ8 + 2 * C::kQ8, sP = sQR + 2 * C::kQR, sSt = sP + 2 * C::kP;
  const uint32_t sSmall = sSt + S * C::kStage;
  const uint32_t bar0 = sSmall + 2 * C::kSmall;  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const uint32_t sValid = bar0 + 16 * S;          // valid tokens of the tile in stage s (producer-written)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_stage_ring(bar0, S, 8);  // every consumer warp releases a stage
  const int32_t* in = info + blockIdx.y * quant::kPartInfoInts;  // grid: detail::split_grid
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;

  if (warp >= 8) {  // ---- producer ----
    detail::setmaxnreg_dec<kProducerRegs, kThreads>();
    if (warp == 8 && lane == 0) produce_tiles<DC, DR, S>(p, in, sSt, bar0, sValid);
    return;
  }
  detail::setmaxnreg_inc<kConsumerRegs, kThreads>();
  // Broadcast from lane 0 so ptxas knows the role is warp-uniform (C7520).
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0), wiw = warp % 4, tid = threadIdx.x % 128;
  const int g = lane / 4, tq = lane % 4;
  const float neg_inf = -__int_as_float(0x7f800000);
  const int row0 = blockIdx.x * 2 * kRows + wg * kRows;  // this warpgroup's first row
  const uint32_t myQ8 = sQ8 + wg * C::kQ8, myQR = sQR + wg * C::kQR, myP = sP + wg * C::kP;
  float* gam = reinterpret_cast<float*>(gbase + (sSmall - base) + wg * C::kSmall);  // [64], P.V order
  float* fin = gam + kRows;                                                          // [64][2]
  const int lrow[2] = {16 * wiw + g, 16 * wiw + g + 8};
  // The thread's channels: all d_c of the warpgroup (vt_fragments_ldsm's groups from 0).
  const uint64_t dq = desc_sw(myQ8, 1024, 1), dqr = desc_sw(myQR, C::kRSbo, C::kRMode);
  const uint64_t dp = desc_sw(myP, 1024, 1);
  // Turn order: warpgroup w issues after bar.sync on kBarTurn + w, which the other arrives at
  // once it has issued; warpgroup 1 passes the first turn to 0. Both walk the same tiles, so
  // both take the same number of turns; warpgroup 0 takes 1's last pass after the loop.
  auto turn_wait = [&] { detail::named_bar_sync(kBarTurn + wg, kConsumers); };
  auto turn_pass = [&] { detail::named_bar_arrive(kBarTurn + 1 - wg, kConsumers); };
  if (wg == 1) detail::named_bar_arrive(kBarTurn, kConsumers);
  auto wait_full = [&](int it_) { detail::mbar_wait(bar0 + 8 * (it_ % S), (it_ / S) & 1); };
  float sv[32];  // S, then P (fp32) of a tile
  // S of the tile in ring slot it_ (arrived) into sv: issued and committed, not waited for.
  auto issue_s = [&](int it_) { issue_s_rows64<DC, DR>(sv, dq, dqr, sSt + (it_ % S) * C::kStage); };

  int split = in[4];
  int it = 0;
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
    const int n_split = offsets[b + 1] - offsets[b];
    detail::named_bar_sync(kBarQ + wg, 128);  // the warpgroup is done with the previous query and fin
    load_query<DC, DR, kRows>(p, b, rows, row0, myQ8, myQR, tid, 128);
    detail::named_bar_sync(kBarQ + wg, 128);
    int lim_off[2];
    float rowf[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lrow[h];
      lim_off[h] = p.s_q - 1 - min(r / p.heads, p.s_q - 1);
      rowf[h] = r < rows ? p.q_scale[static_cast<size_t>(b) * rows + r] * (p.scale * detail::kLog2e) : 0.f;
    }
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f}, sig[2] = {1.f, 1.f};
    float acc[NB][kRows / 2];
#pragma unroll
    for (int mb = 0; mb < NB; ++mb)
#pragma unroll
      for (int i = 0; i < kRows / 2; ++i) acc[mb][i] = 0.f;
    pv_fence_acc<NB, kRows>(acc);  // zeroed before any wgmma of the segment is in flight (C7515)
    // Softmax of tile ti_ (ring slot it_) from its finished S; P8^T and gamma into the
    // warpgroup's buffers, published to the warpgroup.
    auto softmax_to_p = [&](int ti_, int it_) {
#pragma unroll
      for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
      const int stage = it_ % S;
      const uint32_t st = sSt + stage * C::kStage;
      const int j0 = ti_ * kT;
      float skv[16];
      int lim[2];
      softmax_inputs<DC, DR>(st, sValid + 4 * stage, j0, L, lim_off, tq, skv, lim);
      float gamma[2], inv[2];
      softmax_tile_any(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gamma, inv);
      store_p8t_gamma(sv, inv, gamma, myP, gam, lrow, tq);
      detail::fence_proxy_async();             // P^T (generic stores) is read by wgmma
      detail::named_bar_sync(kBarP + wg, 128);  // and gamma by every thread of the warpgroup
    };
    if (t < stop) {  // the first tile's S on its own turn
      wait_full(it);
      turn_wait();
      issue_s(it);
      turn_pass();
      gmma::wait<0>();
      softmax_to_p(t, it);
    }
    for (int ti = t; ti < stop; ++ti, ++it) {
      const bool more = ti + 1 < stop;
      const int stage = it % S;
      const uint32_t st = sSt + stage * C::kStage;
      const int valid = static_cast<int>(lds32(sValid + 4 * stage));
      // V^T of both 32-token k-steps into registers; then the stage is free.
      uint32_t fr0[NB][4], fr1[NB][4];
      vt_fragments_ldsm<NB>(st, 0, wiw, lane, tq, valid, 0, fr0);
      vt_fragments_ldsm<NB>(st, 0, wiw, lane, tq, valid, 1, fr1);
      __syncwarp();
      if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
      pv_rescale<NB, kRows, true>(acc, gam, tq);
      if (more) wait_full(it + 1);
      // ---- this warpgroup's turn: O^T += V^T P^T of tile ti, then S of tile ti + 1 ----
      turn_wait();
      gmma::fence();
      pv_mma_ks<NB, kRows>(acc, fr0, dp);
      pv_mma_ks<NB, kRows>(acc, fr1, detail::gmma_desc_at(dp, 32));
      gmma::commit();
      if (more) issue_s(it + 1);
      turn_pass();
      gmma::wait<0>();
      pv_fence_acc<NB, kRows>(acc);
#pragma unroll
      for (int mb = 0; mb < NB; ++mb)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          gmma::fence_operand(fr0[mb][r]);
          gmma::fence_operand(fr1[mb][r]);
        }
      if (more) softmax_to_p(ti + 1, it + 1);
    }
    // ---- epilogue: 1/l and LSE of the warpgroup's rows, then its d_c columns ----
    write_fin(fin, lrow, m_run, l_run, sig, tq);
    detail::named_bar_sync(kBarP + wg, 128);
    store_pv_rows<DC, NB, kRows>(p, o_acc, lse_acc, b, split, n_split, rows, row0, 0, wiw, g, acc, fin, tq,
                 wiw == 0 && g == 0);
  }
  if (wg == 0) detail::named_bar_sync(kBarTurn, kConsumers);
}

template <int DC, int DR>
void launch_cfg(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  static cuda::SmemLimitSet smem_set;
  const size_t smem = PCfg<DC, DR>::smem();
  cuda::set_smem_limit_once(pair_split_kernel<DC, DR>, smem, smem_set, "fp8 pair decode split kernel smem limit");
  const dim3 grid = detail::split_grid(parts, quant::fp8_decode_row_blocks(p));
  pair_split_kernel<DC, DR><<<grid, kThreads, smem, stream>>>(p, w.info, w.offsets, w.o_acc, w.lse_acc);
  cuda::check(cudaGetLastError(), "fp8 pair decode split launch", "mla decode");
}

}  // namespace

void launch_pair(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  const bool r64 = p.d_r == 64;
  if (p.d_c == 128) r64 ? launch_cfg<128, 64>(p, w, parts, stream) : launch_cfg<128, 32>(p, w, parts, stream);
  else r64 ? launch_cfg<256, 64>(p, w, parts, stream) : launch_cfg<256, 32>(p, w, parts, stream);
}

}  // namespace mla::kernels::fp8
