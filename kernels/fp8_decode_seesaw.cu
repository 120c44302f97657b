// The FP8 split kernel for requests of more than 32 query rows (s_q H), in 64-row blocks, as a
// seesaw of two warpgroups (FlashMLA's division of its BF16 decode, with our transposed P.V):
//   both warpgroups own d_c / 2 output channels: O^T [d_c / 2 x 64 rows] = O^T gamma + V8^T P8^T
//   (wgmma m64n64k32 e4m3, A = V^T built in registers from the tile, B = P^T in shared memory);
//   the tiles of a request segment alternate between them for S = Q8 K8^T + Q_rope K_rope^T and
//   the online softmax: warpgroup k & 1 computes tile k's S, waits for the running max, sum and
//   sigma of tile k - 1 (the other warpgroup's), runs the softmax, hands its state, P8^T and the
//   rows' factors over, then does the P.V of tile k - 1 and of tile k for its channels.
// While one warpgroup runs its softmax (no wgmma of its own in flight: ptxas serialises wgmmas
// whose warpgroup reads accumulators meanwhile, C7514), the other's P.V and next S keep the
// tensor cores busy; the softmax chain across tiles stays sequential, as the twin's rounding
// points require (quant/fp8_decode_twin: P re-quantised per row and tile by sigma = amax / 448,
// O and l in units of the current sigma).
// Warpgroup 2: one thread issues the bulk copies into the stage ring (4 stages at d_c = 512).
#include <cuda_fp8.h>

#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_softmax_rows64.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::fp8 {
namespace {

constexpr int kThreads = 384, kConsumers = 256, kRows = 64;

template <int DC, int DR>
struct SCfg {
  static constexpr int kNB = DC / 128;  // m64 channel blocks per warpgroup (d_c / 2 channels)
  static constexpr int kCPT = 2 * kNB;  // contiguous channels per thread
  static constexpr int kRB = 2 * DR;    // rope row bytes
  static constexpr int kRMode = kRB == 128 ? 1 : 2;
  static constexpr uint32_t kRSbo = 8 * kRB;
  static constexpr uint32_t kStage = StageBytes<DC, DR>::kAligned;
  static constexpr uint32_t kQ8 = kRows * DC, kQR = kRows * kRB, kP = kRows * 128;
  // gamma [2][64], fin [64][2], the handed-over state: m and sigma per row [2][64], each
  // thread's partial l of its two rows [128][2] (floats)
  static constexpr uint32_t kSmall = (2 * kRows + 2 * kRows + 2 * kRows + 2 * 128) * 4;
  static constexpr size_t kFixed = 1024 + kQ8 + kQR + 2 * kP + kSmall;
  // As many stages as fit (each needs 16 bytes of barriers and 4 of valid count), at most 6.
  static constexpr int kFit = static_cast<int>((detail::kMaxSmemPerBlock - kFixed) / (kStage + 20));
  static constexpr int kS = kFit < 6 ? kFit : 6;
  static_assert(kS >= 2, "fp8 seesaw kernel: fewer than two ring stages fit");
  static constexpr size_t smem() { return kFixed + kS * (kStage + 20); }
};

// Named barriers (id 0 is __syncthreads), all over the 256 consumer threads: the query load;
// kState + w: warpgroup w has handed over the state, P8^T and gamma of its latest tile (w
// arrives, the other waits); kPFree + w: the other warpgroup's P.V is done with P^T buffer w
// (the other arrives, w waits before overwriting it); kFin: the segment's 1/l and LSE;
// kOwn + w (warpgroup w's 128 threads): its P8^T and gamma are written before its own P.V.
constexpr int kBarQ = 1, kState = 2, kPFree = 4, kFin = 6, kOwn = 7;

template <int DC, int DR>
__global__ void __launch_bounds__(kThreads, 1)
    seesaw_split_kernel(const quant::Fp8DecodeParams p, const int32_t* __restrict__ info,
                        const int32_t* __restrict__ offsets, float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = SCfg<DC, DR>;
  constexpr int S = C::kS, NB = C::kNB;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ8 = base, sQR = sQ8 + C::kQ8, sSt = sQR + C::kQR, sP = sSt + S * C::kStage;
  const uint32_t sSmall = sP + 2 * C::kP;
  float* gam = reinterpret_cast<float*>(gbase + (sSmall - base));  // [2][64], by P.V thread (gam_index)
  float* fin = gam + 2 * kRows;                                     // [64][2]
  float* st_m = fin + 2 * kRows;                                    // [64]
  float* st_sig = st_m + kRows;                                     // [64]
  float* st_l = st_sig + kRows;                                     // [128][2]
  const uint32_t bar0 = sSmall + C::kSmall;  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const uint32_t sValid = bar0 + 16 * S;     // valid tokens of the tile in stage s (producer-written)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      detail::mbar_init(bar0 + 8 * s, 1);        // the producer's expect_tx
      detail::mbar_init(bar0 + 8 * (S + s), 8);  // every consumer warp releases a stage
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int32_t* in = info + blockIdx.y * quant::kPartInfoInts;  // grid: detail::split_grid
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * kRows;

  if (warp >= 8) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (warp == 8 && lane == 0) produce_tiles<DC, DR, S>(p, in, sSt, bar0, sValid);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  // Broadcast from lane 0 so ptxas knows the role is warp-uniform (an RS wgmma under a branch it
  // cannot prove uniform is serialised, C7520).
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0), wiw = warp % 4, wtid = threadIdx.x % 128;
  const int g = lane / 4, tq = lane % 4;
  const float neg_inf = -__int_as_float(0x7f800000);
  const int lrow[2] = {16 * wiw + g, 16 * wiw + g + 8};
  // P.V: accumulator row (block mb, 16 wiw + g + 8 h) is channel c0 + 2 mb + h.
  const int c0 = wg * (DC / 2) + (8 * wiw + g) * C::kCPT;
  const uint32_t cofs = (c0 >> 7) * 8192 + (c0 & 15);
  const int chunk = (c0 & 127) >> 4;
  const uint64_t dq = desc_sw(sQ8, 1024, 1), dqr = desc_sw(sQR, C::kRSbo, C::kRMode);
  int split = in[4];
  int it = 0;
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
    const int n = stop - t;
    const int n_split = offsets[b + 1] - offsets[b];
    detail::named_bar_sync(kBarQ, kConsumers);  // both warpgroups are done with the previous query
    load_query<DC, DR, kRows>(p, b, rows, row0, sQ8, sQR, threadIdx.x, kConsumers);
    detail::named_bar_sync(kBarQ, kConsumers);
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

    // O^T += V8^T P8^T of the tile in ring slot it_ over this warpgroup's channels, with the
    // factors and P^T of buffer pb; releases the stage for this warpgroup's warps. One k-step's
    // V^T fragments at a time (16 registers).
    auto pv = [&](int it_, int pb) {
      const int stage = it_ % S;
      const uint32_t st = sSt + stage * C::kStage;
      detail::mbar_wait(bar0 + 8 * stage, (it_ / S) & 1);  // arrived long ago; for visibility
      const int valid = static_cast<int>(lds32(sValid + 4 * stage));
      const uint64_t dp = desc_sw(sP + pb * C::kP, 1024, 1);
      uint32_t fr[NB][4];
      vt_fragments_ks<NB>(st, cofs, chunk, tq, valid, 0, fr);
      pv_rescale<NB, kRows, true>(acc, gam + pb * kRows, tq);
      gmma::fence();
      pv_mma_ks<NB, kRows>(acc, fr, dp);
      gmma::commit();
      gmma::wait<0>();
      pv_fence_acc<NB, kRows>(acc);
      vt_fragments_ks<NB>(st, cofs, chunk, tq, valid, 1, fr);
      __syncwarp();
      if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
      gmma::fence();
      pv_mma_ks<NB, kRows>(acc, fr, detail::gmma_desc_at(dp, 32));
      gmma::commit();
      gmma::wait<0>();
      pv_fence_acc<NB, kRows>(acc);
    };

    for (int k = 0; k < n; ++k) {
      const int it_k = it + k;
      if ((k & 1) == wg) {
        // ======== tile k is ours: S, the softmax after tile k - 1's, hand-over, P.V ========
        const int stage = it_k % S;
        const uint32_t st = sSt + stage * C::kStage;
        detail::mbar_wait(bar0 + 8 * stage, (it_k / S) & 1);
        float sv[32];
        {
          const uint64_t dt = desc_sw(st, 1024, 1), dtr = desc_sw(st + 64 * DC, C::kRSbo, C::kRMode);
          gmma::fence();
          ss_e4m3_n64_first(sv, dq, dt);
#pragma unroll
          for (int kk = 1; kk < DC / 32; ++kk) {
            const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
            ss_e4m3_n64(sv, detail::gmma_desc_at(dq, off), detail::gmma_desc_at(dt, off));
          }
#pragma unroll
          for (int kk = 0; kk < DR / 16; ++kk)
            gmma::wgmma_ss_n64(sv, detail::gmma_desc_at(dqr, kk * 32), detail::gmma_desc_at(dtr, kk * 32));
          gmma::commit();
          gmma::wait<0>();
#pragma unroll
          for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
        }
        const int j0 = (t + k) * kT;
        const int valid = static_cast<int>(lds32(sValid + 4 * stage));
        float skv[16];  // s_k of this thread's 16 tokens (8 n + 2 tq + e)
        const uint32_t skp = st + 64 * (DC + C::kRB);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const uint2 k2 = lds64(skp + 4 * (8 * q + 2 * tq));
          skv[2 * q] = __uint_as_float(k2.x);
          skv[2 * q + 1] = __uint_as_float(k2.y);
        }
        if (k > 0) {  // the other warpgroup's state after tile k - 1
          detail::named_bar_sync(kState + (wg ^ 1), kConsumers);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            m_run[h] = st_m[lrow[h]];
            sig[h] = st_sig[lrow[h]];
            l_run[h] = st_l[2 * wtid + h];
          }
        }
        const int lim[2] = {min(L - lim_off[0], j0 + valid), min(L - lim_off[1], j0 + valid)};
        float gamma[2], inv[2];
        if (j0 + kT <= min(lim[0], lim[1]))
          softmax_tile_rows64<false>(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gamma, inv);
        else
          softmax_tile_rows64<true>(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gamma, inv);
        // ---- hand-over: P8^T and gamma into buffer wg, the state (or, after the last tile,
        // 1/l and the LSE) ----
        if (k >= 2) detail::named_bar_sync(kPFree + wg, kConsumers);  // the other's P.V of tile k - 2 is done
        store_p8t(sv, inv, sP + wg * C::kP, lrow, tq);
        if (tq == 0) {
          gam[wg * kRows + gam_index(lrow[0])] = gamma[0];
          gam[wg * kRows + gam_index(lrow[1])] = gamma[1];
        }
        if (k + 1 < n) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (tq == 0) {
              st_m[lrow[h]] = m_run[h];
              st_sig[lrow[h]] = sig[h];
            }
            st_l[2 * wtid + h] = l_run[h];
          }
        } else {
          write_fin(fin, lrow, m_run, l_run, sig, tq);
        }
        detail::fence_proxy_async();
        detail::named_bar_arrive(kState + wg, kConsumers);
        if (k > 0) {
          pv(it_k - 1, wg ^ 1);
          detail::named_bar_arrive(kPFree + (wg ^ 1), kConsumers);
        }
        detail::named_bar_sync(kOwn + wg, 128);
        pv(it_k, wg);
      } else if (k == n - 1) {
        // ======== the segment's last tile is the other's: its P.V for our channels ========
        detail::named_bar_sync(kState + (wg ^ 1), kConsumers);
        pv(it_k, wg ^ 1);
        detail::named_bar_arrive(kPFree + (wg ^ 1), kConsumers);
      }
    }
    // The other warpgroup's P.V of our last tile (the one arrival on kPFree + wg not yet
    // waited for); a segment without tiles has no owner: warpgroup 0 writes its empty rows.
    if ((wg == 0 && n >= 1) || (wg == 1 && n >= 2)) detail::named_bar_sync(kPFree + wg, kConsumers);
    if (n == 0 && wg == 0) write_fin(fin, lrow, m_run, l_run, sig, tq);
    it += n;
    // ---- store: bf16 output (one split) or the split's fp32 partial + LSE ----
    detail::named_bar_sync(kFin, kConsumers);
    store_pv_rows<DC, NB, kRows>(p, o_acc, lse_acc, b, split, n_split, rows, row0, c0, acc, fin, tq,
                                 wg == 0 && wiw == 0 && g == 0);
  }
}

template <int DC, int DR>
void launch_cfg(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  static bool smem_set = false;
  const size_t smem = SCfg<DC, DR>::smem();
  cuda::set_smem_limit_once(seesaw_split_kernel<DC, DR>, smem, smem_set, "fp8 seesaw decode split kernel smem limit");
  const dim3 grid = detail::split_grid(parts, quant::fp8_decode_row_blocks(p));
  seesaw_split_kernel<DC, DR><<<grid, kThreads, smem, stream>>>(p, w.info, w.offsets, w.o_acc, w.lse_acc);
  cuda::check(cudaGetLastError(), "fp8 seesaw decode split launch", "mla decode");
}

template <int DR>
void launch_dc(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  if (p.d_c == 128) launch_cfg<128, DR>(p, w, parts, stream);
  else if (p.d_c == 256) launch_cfg<256, DR>(p, w, parts, stream);
  else launch_cfg<512, DR>(p, w, parts, stream);
}

}  // namespace

void launch_rows64_seesaw(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  if (p.d_r == 64) launch_dc<64>(p, w, parts, stream);
  else launch_dc<32>(p, w, parts, stream);
}

}  // namespace mla::kernels::fp8
