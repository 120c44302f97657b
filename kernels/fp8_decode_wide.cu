// The FP8 split kernel for more than 32 query rows at d_c = 512 (64-row blocks), with the BF16
// many-head kernel's division of work (decode_manyhead_v6.cu) instead of the 64-row kernel's
// (fp8_decode_rows64.cu, which stays for the FP4 route and d_c < 512):
//   warpgroup 0: S [64 rows x 64 tokens] = Q8 K8^T + Q_rope K_rope^T (as the 64-row kernel), the
//        online softmax (fp8_softmax_rows64.cuh: s_k folded into P, P re-quantised per row and
//        tile), then O[:, 0:256] = O gamma + P8 V8 issued from registers (wgmma m64n256k32 e4m3,
//        A = P8, B = V^T), not waited for; then P8 and gamma to shared memory for warpgroup 1;
//   warpgroup 1: O[:, 256:512] = O gamma + P8 V8 with A = P8 from shared memory;
//   warpgroup 2: one thread issues the tiles' bulk copies into the stage ring; warps 9-11 write
//        each tile's V^T (K-major, 64-byte rows and swizzle) into one of two buffers.
// Why V^T in shared memory: FP8 wgmma takes both shared operands K-major, so P.V needs the latent
// with tokens contiguous. The 64-row kernel built V^T A fragments in its P.V warpgroups'
// registers and kept O^T (channels as wgmma's M): 128 accumulators a thread beside the
// fragments, each tile's P.V waited for twice, and S + softmax on one warpgroup handing P to the
// others (about 3,850 cycles a 64-row tile on an H200 against ~1,200 of tensor work). Here
// otherwise idle producer warps transpose (the 64-row kernel's ldmatrix.trans + byte permutes,
// stored instead of kept), the P.V is issued once per tile without a wait, and the S of the
// next tile queues behind it on the tensor cores, as in v6.
// Token order inside each 16-token half of a k-step is p8t_k's (k = 4 a + 2 m + e holds token
// 8 m + 2 a + e): the S accumulator's registers then pack straight into P8 A fragments, and the
// transposers write V^T rows in the same order (a permutation of the sum over tokens).
// Numerics: the twin's rounding points (quant/fp8_decode_twin), as the 64-row kernel.
#include <cuda_fp8.h>

#include <cstdlib>

#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_softmax_rows64.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::fp8 {
namespace {

constexpr int kThreads = 384, kConsumers = 256, kRows = 64, kDC = 512, kNH = kDC / 2;
constexpr int kTransposers = 3;  // warps 9-11; warp 8's lane 0 issues the copies
constexpr uint32_t kVtBytes = kDC * 64;  // one V^T buffer: [channel][64 token bytes]

template <int DR>
struct WCfg {
  static constexpr int kRB = 2 * DR;  // rope row bytes
  static constexpr int kRMode = kRB == 128 ? 1 : 2;
  static constexpr uint32_t kRSbo = 8 * kRB;
  static constexpr uint32_t kStage = StageBytes<kDC, DR>::kAligned;
  static constexpr uint32_t kQ8 = kRows * kDC, kQR = kRows * kRB;
  static constexpr uint32_t kVt = kVtBytes;
  static constexpr uint32_t kP = kRows * 128;  // P8 [row][128-byte row, 64 used]
  static constexpr uint32_t kSmall = 3 * kRows * 4;  // gamma [64], fin [64][2]
  static constexpr uint32_t kVtBars = 32;            // V^T full[2], empty[2]
  static constexpr size_t kFixed = 1024 + kQ8 + kQR + 2 * kVt + kP + kSmall + kVtBars;
  // Each stage: its bytes, 16 of barriers and 4 of valid count; as many as fit, at most 4.
  static constexpr int kFit = static_cast<int>((detail::kMaxSmemPerBlock - kFixed) / (kStage + 20));
  static constexpr int kS = kFit < 4 ? kFit : 4;
  static_assert(kS >= 2, "fp8 wide kernel: fewer than two ring stages fit");
  static constexpr size_t smem() { return kFixed + kS * (kStage + 20); }
};

// Named barriers (0 is __syncthreads): warpgroup 0's query; P8 buffer free (warpgroup 1 arrives
// once its P.V of the previous tile is done, warpgroup 0 waits) and full (the reverse); a
// segment's 1/l and LSE written (both wait) and read (warpgroup 1 arrives, warpgroup 0 waits
// before the next segment's).
constexpr int kBarQ = 1, kBarPFree = 2, kBarPFull = 3, kBarFin = 4, kBarFinFree = 5;

// Warps 9-11 of the producer warpgroup (tw = 0..2): V^T of every tile of the part into buffer
// it & 1, from the stage the copy thread filled. A unit is one 32-token k-step of one 16-channel
// group: one ldmatrix.x4.trans and four byte permutes (vt_fragments_ldsm's), the four registers
// stored at channel 16 G + 2 g (+1), k = 32 ks + 4 tq (+16), 64-byte swizzle. Tokens at or past
// the tile's valid count are written as 0 (their bytes may be NaN; P is 0 there).
template <int S>
__device__ __forceinline__ void transpose_tiles(const quant::Fp8DecodeParams& p, const int32_t* in, uint32_t sSt,
                                                uint32_t stage_bytes, uint32_t bar0, uint32_t sValid, uint32_t sVt,
                                                uint32_t vbar, int tw, int lane, int probe) {
  const int end_b = in[2], end_t = in[3];
  const int r = lane & 7, g = lane >> 2, tq = lane & 3;
  const uint32_t swz = static_cast<uint32_t>(g & 3);  // (channel >> 1) & 3 of channels 16 G + 2 g (+1)
  int it = 0;
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(p.seqlens[b], kT);
    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S, v = it & 1;
      detail::mbar_wait(bar0 + 8 * stage, (it / S) & 1);          // the tile landed
      if (!(probe & 16)) detail::mbar_wait(vbar + 8 * (2 + v), ((it >> 1) & 1) ^ 1);  // P.V of tile it - 2 is done with buffer v
      const int valid = static_cast<int>(lds32(sValid + 4 * stage));
      const uint32_t st = sSt + stage * stage_bytes, vt = sVt + v * kVtBytes;
      auto mask = [&](int t0) {
        return (t0 < valid ? 0xFFu : 0u) | (t0 + 1 < valid ? 0xFF00u : 0u) | (t0 + 8 < valid ? 0xFF0000u : 0u) |
               (t0 + 9 < valid ? 0xFF000000u : 0u);
      };
      for (int u = tw; u < ((probe & 1) ? 0 : kDC / 8); u += kTransposers) {
        const int ks = u / (kDC / 16), G = u % (kDC / 16);
        const uint32_t a = st + static_cast<uint32_t>(32 * ks + 8 * (lane >> 3) + r) * 128 +
                           static_cast<uint32_t>(G >> 3) * 8192 + ((static_cast<uint32_t>(G & 7) ^ r) << 4);
        uint32_t x0, x1, x2, x3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                     : "r"(a));
        const uint32_t mk0 = mask(32 * ks + 2 * tq), mk1 = mask(32 * ks + 2 * tq + 16);
        const uint32_t c0 = vt + static_cast<uint32_t>(16 * G + 2 * g) * 64 + 4 * tq;
        const uint32_t h0 = ((2 * ks) ^ swz) << 4, h1 = ((2 * ks + 1) ^ swz) << 4;
        sts32(c0 + h0, __byte_perm(x0, x1, 0x6420) & mk0);
        sts32(c0 + 64 + h0, __byte_perm(x0, x1, 0x7531) & mk0);
        sts32(c0 + h1, __byte_perm(x2, x3, 0x6420) & mk1);
        sts32(c0 + 64 + h1, __byte_perm(x2, x3, 0x7531) & mk1);
      }
      detail::fence_proxy_async();  // V^T is read by wgmma (async proxy)
      __syncwarp();
      if (lane == 0) {
        detail::mbar_arrive(vbar + 8 * v);          // this warp's share of V^T is written
        detail::mbar_arrive(bar0 + 8 * (S + stage));  // and it is done with the stage
      }
    }
  }
}

template <int DR>
__global__ void __launch_bounds__(kThreads, 1)
    wide_split_kernel(const quant::Fp8DecodeParams p, const int32_t* __restrict__ info,
                      const int32_t* __restrict__ offsets, float* __restrict__ o_acc, float* __restrict__ lse_acc, int probe) {
  using C = WCfg<DR>;
  constexpr int S = C::kS;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ8 = base, sQR = sQ8 + C::kQ8, sVt = sQR + C::kQR, sSt = sVt + 2 * C::kVt;
  const uint32_t sP = sSt + S * C::kStage, sSmall = sP + C::kP;
  float* gam = reinterpret_cast<float*>(gbase + (sSmall - base));  // [64] by row
  float* fin = gam + kRows;                                         // [64][2]
  const uint32_t vbar = sSmall + C::kSmall;  // V^T full[v] at vbar + 8 v, empty[v] at vbar + 8 (2 + v)
  const uint32_t bar0 = vbar + C::kVtBars;   // stage full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const uint32_t sValid = bar0 + 16 * S;     // valid tokens of the tile in stage s (producer-written)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // A stage is released by warpgroup 0's warps (S and s_k read) and the transposers; a V^T buffer
  // is filled by the transposers and released by both consumer warpgroups' warps.
  init_stage_ring(bar0, S, 4 + kTransposers);
  init_stage_ring(vbar, 2, 8, kTransposers);
  const int32_t* in = info + blockIdx.y * quant::kPartInfoInts;  // grid: detail::split_grid
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * kRows;

  if (warp >= 8) {  // ---- producer warpgroup ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8) {
      if (lane == 0) produce_tiles<kDC, DR, S>(p, in, sSt, bar0, sValid);
    } else {
      transpose_tiles<S>(p, in, sSt, C::kStage, bar0, sValid, sVt, vbar, warp - 9, lane, probe);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  // From lane 0 so that ptxas knows the role is warp-uniform (RS wgmma under a branch it cannot
  // prove uniform is serialised, C7520).
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0), wiw = warp % 4;
  const int g = lane / 4, tq = lane % 4;
  const float neg_inf = -__int_as_float(0x7f800000);
  int lrow[2], lim_off[2];  // the thread's two rows of the block and their causal offsets
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lrow[h] = 16 * wiw + g + 8 * h;
    lim_off[h] = p.s_q - 1 - min((row0 + lrow[h]) / p.heads, p.s_q - 1);
  }
  // Warpgroup 0 alone reads the query: each segment's by cp.async, the next one's as soon as the
  // segment's last S is done.
  if (wg == 0 && detail::part_has_segment(in[0], in[1], end_b, end_t))
    issue_query<kDC, DR, kRows>(p, in[0], rows, row0, sQ8, sQR, threadIdx.x, 128);
  const uint32_t vt_mine = sVt + static_cast<uint32_t>(wg) * (kNH * 64);  // this warpgroup's channels in buffer 0
  auto release_vt = [&](int it_) {
    __syncwarp();
    if (lane == 0) detail::mbar_arrive(vbar + 8 * (2 + (it_ & 1)));
  };
  auto rescale = [&](float (&acc_)[kNH / 2], const float (&gm)[2]) {
#pragma unroll
    for (int i = 0; i < kNH / 2; ++i) acc_[i] *= gm[(i >> 1) & 1];
  };
  int it = 0, pending = -1;  // pending: the tile whose V^T buffer this warp still has to release
  int split = in[4];
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
    const int n_split = offsets[b + 1] - offsets[b];
    const bool next_segment = detail::part_has_segment(b + 1, 0, end_b, end_t);
    float acc[kNH / 2];
#pragma unroll
    for (int i = 0; i < kNH / 2; ++i) acc[i] = 0.f;
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f}, sig[2] = {1.f, 1.f}, rowf[2] = {0.f, 0.f};
    if (wg == 0) {
      detail::cp_async_wait_all();  // this thread's chunks of the segment's query
      detail::fence_proxy_async();
      detail::named_bar_sync(kBarQ, 128);  // every chunk of it
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + lrow[h];
        rowf[h] = r < rows ? p.q_scale[static_cast<size_t>(b) * rows + r] * (p.scale * detail::kLog2e) : 0.f;
      }
    }
    for (int ti = t; ti < stop; ++ti, ++it) {
      gmma::wait<0>();  // this warpgroup's P.V of the previous tile is done
#pragma unroll
      for (int i = 0; i < kNH / 2; ++i) gmma::fence_operand(acc[i]);
      if (pending >= 0) release_vt(pending);
      pending = it;
      const int stage = it % S, v = it & 1;
      const uint64_t dv = desc_sw(vt_mine + v * C::kVt, 512, 2);  // B = V^T of this warpgroup's channels
      float gm[2];
      if (wg == 0) {
        const uint32_t st = sSt + stage * C::kStage;
        float sv[32];
        {
          const uint64_t dq = desc_sw(sQ8, 1024, 1), dqr = desc_sw(sQR, C::kRSbo, C::kRMode);
          detail::mbar_wait(bar0 + 8 * stage, (it / S) & 1);
          issue_s_rows64<kDC, DR>(sv, dq, dqr, st);
        }
        gmma::wait<0>();
#pragma unroll
        for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
        const int j0 = ti * kT;
        float skv[16], inv[2];
        int lim[2];
        softmax_inputs<kDC, DR>(st, sValid + 4 * stage, j0, L, lim_off, tq, skv, lim);
        __syncwarp();  // then the stage is free for us
        if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
        if (probe & 2) { gm[0] = gm[1] = inv[0] = inv[1] = 1.f; l_run[0] += skv[0]; }
        else softmax_tile_any(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gm, inv);
        rescale(acc, gm);
        // P8 as A fragments of the two k-steps: register 4 n + 2 h + e of S holds row h, token
        // 8 n + 2 tq + e, so fragment (ks, 2 half + h) takes n = 4 ks + 2 half, + 1 (p8t_k order).
        uint32_t pa[2][4];
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int f = 0; f < 4; ++f) {
            const int h = f & 1, n = 4 * ks + 2 * (f >> 1);
            pa[ks][f] = pack_e4m3(sv[4 * n + 2 * h] * inv[h], sv[4 * n + 2 * h + 1] * inv[h],
                                  sv[4 * n + 4 + 2 * h] * inv[h], sv[4 * n + 4 + 2 * h + 1] * inv[h]);
          }
        if (!(probe & 32)) detail::mbar_wait(vbar + 8 * v, (it >> 1) & 1);  // the tile's V^T
#pragma unroll
        for (int i = 0; i < kNH / 2; ++i) gmma::fence_operand(acc[i]);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int f = 0; f < 4; ++f) gmma::fence_operand(pa[ks][f]);
        gmma::fence();
        if (!(probe & 4)) {
        rs_e4m3_n256(acc, pa[0], dv);
        rs_e4m3_n256(acc, pa[1], detail::gmma_desc_at(dv, 32));
        }
        gmma::commit();
        // P8 [row][k] (128-byte rows and swizzle) and gamma for warpgroup 1, once its P.V of the
        // previous tile is done with them.
        detail::named_bar_sync(kBarPFree, kConsumers);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int f = 0; f < 4; ++f) {
            const int r = lrow[f & 1];
            sts32(sP + r * 128 + (((2 * ks + (f >> 1)) ^ (r & 7)) << 4) + 4 * tq, pa[ks][f]);
          }
        if (tq == 0) {
          gam[lrow[0]] = gm[0];
          gam[lrow[1]] = gm[1];
        }
        detail::fence_proxy_async();  // P8 (generic stores) is read by wgmma (async proxy)
        detail::named_bar_arrive(kBarPFull, kConsumers);
      } else {
        detail::named_bar_arrive(kBarPFree, kConsumers);
        detail::named_bar_sync(kBarPFull, kConsumers);
        gm[0] = gam[lrow[0]];
        gm[1] = gam[lrow[1]];
        rescale(acc, gm);
        if (!(probe & 32)) detail::mbar_wait(vbar + 8 * v, (it >> 1) & 1);  // the tile's V^T
        const uint64_t dp = desc_sw(sP, 1024, 1);
#pragma unroll
        for (int i = 0; i < kNH / 2; ++i) gmma::fence_operand(acc[i]);
        gmma::fence();
        if (!(probe & 4)) {
        ss_e4m3_n256(acc, dp, dv);
        ss_e4m3_n256(acc, detail::gmma_desc_at(dp, 32), detail::gmma_desc_at(dv, 32));
        }
        gmma::commit();
      }
    }
    // ---- epilogue: 1/l and the LSE from warpgroup 0, then both store their columns ----
    gmma::wait<0>();
#pragma unroll
    for (int i = 0; i < kNH / 2; ++i) gmma::fence_operand(acc[i]);
    if (pending >= 0) release_vt(pending);
    pending = -1;
    if (wg == 0) {
      if (next_segment) issue_query<kDC, DR, kRows>(p, b + 1, rows, row0, sQ8, sQR, threadIdx.x, 128);  // S done
      if (b != in[0]) detail::named_bar_sync(kBarFinFree, kConsumers);  // warpgroup 1 read the last segment's
      write_fin(fin, lrow, m_run, l_run, sig, tq);
    }
    detail::named_bar_sync(kBarFin, kConsumers);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lrow[h];
      if (r >= rows) continue;
      const float inv = fin[2 * lrow[h]], lse = fin[2 * lrow[h] + 1];
      const int col0 = wg * kNH + 2 * tq;
      if (n_split == 1) {
        uint16_t* dst = p.out + (static_cast<size_t>(b) * rows + r) * kDC + col0;
#pragma unroll
        for (int j = 0; j < kNH / 8; ++j)
          *reinterpret_cast<uint32_t*>(dst + 8 * j) = detail::pack_bf16(acc[4 * j + 2 * h] * inv, acc[4 * j + 2 * h + 1] * inv);
        if (wg == 0 && tq == 0) p.lse[static_cast<size_t>(b) * rows + r] = lse;
      } else {
        float* dst = o_acc + (static_cast<size_t>(split) * rows + r) * kDC + col0;
#pragma unroll
        for (int j = 0; j < kNH / 8; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(acc[4 * j + 2 * h] * inv, acc[4 * j + 2 * h + 1] * inv);
        if (wg == 0 && tq == 0) lse_acc[static_cast<size_t>(split) * rows + r] = lse;
      }
    }
    if (wg == 1 && next_segment) detail::named_bar_arrive(kBarFinFree, kConsumers);  // fin read
  }
}

template <int DR>
void launch_cfg(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  static cuda::SmemLimitSet smem_set;
  const size_t smem = WCfg<DR>::smem();
  cuda::set_smem_limit_once(wide_split_kernel<DR>, smem, smem_set, "fp8 wide decode split kernel smem limit");
  const dim3 grid = detail::split_grid(parts, quant::fp8_decode_row_blocks(p));
  // MLA_WIDE_PROBE (session 17, call 2; timing only, results wrong): 1 transposers copy nothing,
  // 2 no softmax, 4 no P.V wgmmas, 16 transposers do not wait for a free V^T buffer, 32 consumers
  // do not wait for V^T.
  static const int probe = [] { const char* e = std::getenv("MLA_WIDE_PROBE"); return e ? std::atoi(e) : 0; }();
  wide_split_kernel<DR><<<grid, kThreads, smem, stream>>>(p, w.info, w.offsets, w.o_acc, w.lse_acc, probe);
  cuda::check(cudaGetLastError(), "fp8 wide decode split launch", "mla decode");
}

}  // namespace

void launch_wide(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  if (p.d_c != kDC) throw InputError("fp8 wide decode: d_c = " + std::to_string(p.d_c) + " (takes 512)");
  if (p.d_r == 64) launch_cfg<64>(p, w, parts, stream);
  else launch_cfg<32>(p, w, parts, stream);
}

}  // namespace mla::kernels::fp8
