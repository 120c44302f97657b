// The FP8 split kernel for more than 32 query rows at d_c = 512 (64-row blocks, FP8 pages),
// called by fp8_decode (kernels/fp8_decode.cu) between the scheduler and the combine. The 64-row
// kernel (fp8_decode_rows64.cu) keeps the FP4 route and d_c < 512.
//   warpgroup 0: S [64 rows x 64 tokens] = Q8 K8^T + Q_rope K_rope^T (fp8_softmax_rows64.cuh:
//        issue_s_rows64), the online softmax (the same function, the twin's rounding points), P8
//        and the rows' gamma into one of two buffers. S of tile i + 1 is issued into a second
//        accumulator set before the softmax of tile i, so the tensor cores compute it under the
//        softmax (FlashAttention-3's order; every wait is wait<0>);
//   warpgroups 1 and 2: O [64 rows x 256 channels] = O gamma + P8 V8 (wgmma m64n128k32 e4m3,
//        A = P8 and B = V^T from shared memory), each over its own half of d_c; each writes the
//        V^T of its half of the tile itself, into its own buffer (K-major, 64-byte rows and
//        swizzle: ldmatrix.trans and byte permutes, the 64-row kernel's V^T fragments stored);
//   warpgroup 3: one thread issues the tiles' bulk copies into the stage ring.
// Why: FP8 wgmma takes both shared operands K-major, so P.V needs the latent with tokens
// contiguous. The 64-row kernel keeps O^T (channels as M) with V^T fragments in the P.V
// warpgroups' registers, one k-step's at a time, and waits for each k-step's wgmma (two exposed
// waits a tile); its warpgroup 0 runs S and the softmax back to back. Session 17 measured both
// pieces on the chain (docs/gpu-notes.md): here the P.V warpgroups issue a tile's P.V once, and
// S runs under the softmax. (A first version with V^T written by three producer warps was 1.6x
// slower: three warps could not transpose a tile in the time of one.)
// Token order inside each 16-token half of a k-step is p8t_k's (k = 4 a + 2 m + e holds token
// 8 m + 2 a + e) in P8 (store_p8t) and in V^T alike: a permutation of the sum over tokens.
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

constexpr int kThreads = 512, kConsumers = 384, kRows = 64, kDC = 512, kNH = kDC / 2;
constexpr uint32_t kVtHalf = kNH * 64;  // one P.V warpgroup's V^T: [256 channels][64 token bytes]

template <int DR>
struct WCfg {
  static constexpr int kRB = 2 * DR;  // rope row bytes
  static constexpr int kRMode = kRB == 128 ? 1 : 2;
  static constexpr uint32_t kRSbo = 8 * kRB;
  static constexpr uint32_t kStage = StageBytes<kDC, DR>::kAligned;
  static constexpr uint32_t kQ8 = kRows * kDC, kQR = kRows * kRB;
  static constexpr uint32_t kP = kRows * 128;        // P8 [row][128-byte row, 64 used]
  static constexpr uint32_t kSmall = 4 * kRows * 4;  // gamma [2][64], fin [64][2]
  static constexpr size_t kFixed = 1024 + kQ8 + kQR + 2 * kVtHalf + 2 * kP + kSmall;
  // Each stage: its bytes, 16 of barriers and 4 of valid count; as many as fit, at most 4.
  static constexpr int kFit = static_cast<int>((detail::kMaxSmemPerBlock - kFixed) / (kStage + 20));
  static constexpr int kS = kFit < 4 ? kFit : 4;
  static_assert(kS >= 2, "fp8 wide kernel: fewer than two ring stages fit");
  static constexpr size_t smem() { return kFixed + kS * (kStage + 20); }
};

// Named barriers (0 is __syncthreads): warpgroup 0's query; P8 buffer k full (warpgroup 0
// arrives, 1-2 wait) and free (the reverse); a segment's 1/l and LSE written (warpgroup 0 arrives,
// 1-2 wait) and read (1-2 arrive, warpgroup 0 waits before the next segment's); a P.V
// warpgroup's V^T written (its own 128 threads).
constexpr int kBarQ = 1, kBarFull = 2, kBarFree = 4, kBarFin = 6, kBarFinFree = 7, kBarVt = 8;

// V^T of one P.V warpgroup's half of the tile in stage st (groups g0 .. g0 + 15 of 16 channels)
// into vt: 32 units (a 32-token k-step of one group), 8 a warp. A unit: one ldmatrix.x4.trans
// (lane (g, tq) gets channels 2 g, 2 g + 1 of tokens 2 tq, 2 tq + 1 of each 8-token matrix), four
// byte permutes into a channel's four tokens in p8t_k order, four 4-byte stores at local channel
// 16 lg + 2 g (+1), k = 32 ks + 4 tq (+16), 64-byte swizzle. kMask: tokens at or past `valid`
// written as 0 (their bytes may be NaN; P is 0 there), only on a tile the length cuts.
template <bool kMask>
__device__ __forceinline__ void transpose_half(uint32_t st, uint32_t vt, int g0, int wiw, int lane, int valid) {
  const int r = lane & 7, g = lane >> 2, tq = lane & 3;
  const uint32_t swz = static_cast<uint32_t>(g & 3);  // (channel >> 1) & 3 of channels 16 lg + 2 g (+1)
  const uint32_t rows = st + static_cast<uint32_t>(8 * (lane >> 3) + r) * 128;
  auto mask = [&](int t0) {
    return (t0 < valid ? 0xFFu : 0u) | (t0 + 1 < valid ? 0xFF00u : 0u) | (t0 + 8 < valid ? 0xFF0000u : 0u) |
           (t0 + 9 < valid ? 0xFF000000u : 0u);
  };
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int ks = i >> 2, lg = wiw + 4 * (i & 3), G = g0 + lg;
    const uint32_t a = rows + static_cast<uint32_t>(ks * 32 * 128) + static_cast<uint32_t>(G >> 3) * 8192 +
                       ((static_cast<uint32_t>(G & 7) ^ r) << 4);
    uint32_t x0, x1, x2, x3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                 : "r"(a));
    uint32_t f0 = __byte_perm(x0, x1, 0x6420), f1 = __byte_perm(x0, x1, 0x7531);
    uint32_t f2 = __byte_perm(x2, x3, 0x6420), f3 = __byte_perm(x2, x3, 0x7531);
    if constexpr (kMask) {
      const uint32_t mk0 = mask(32 * ks + 2 * tq), mk1 = mask(32 * ks + 2 * tq + 16);
      f0 &= mk0;
      f1 &= mk0;
      f2 &= mk1;
      f3 &= mk1;
    }
    const uint32_t c0 = vt + static_cast<uint32_t>(16 * lg + 2 * g) * 64 + 4 * tq;
    const uint32_t h0 = ((2 * ks) ^ swz) << 4, h1 = ((2 * ks + 1) ^ swz) << 4;
    sts32(c0 + h0, f0);
    sts32(c0 + 64 + h0, f1);
    sts32(c0 + h1, f2);
    sts32(c0 + 64 + h1, f3);
  }
}

// S [64 x 64] of the tile in stage st into acc, as issue_s_rows64 but with the first k-step's
// accumulators tied ("+f", scale-d = 0: the old values are not read): acc stays one register set
// across the loop. With write-only outputs the compiler renames them per tile and moves the new
// set into the old one at the loop's back edge, a read of an in-flight wgmma's accumulators
// before its wait (ptxas C7514 / C7517: every wgmma serialised).
__device__ __forceinline__ void ss_e4m3_n64_zero(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(0));
}
template <int DR>
__device__ __forceinline__ void issue_s_tied(float (&acc)[32], uint64_t dq, uint64_t dqr, uint32_t st) {
  constexpr int kRB = 2 * DR;
  const uint64_t dt = desc_sw(st, 1024, 1), dtr = desc_sw(st + 64 * kDC, 8 * kRB, kRB == 128 ? 1 : 2);
  gmma::fence();
  ss_e4m3_n64_zero(acc, dq, dt);
#pragma unroll
  for (int kk = 1; kk < kDC / 32; ++kk) {
    const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
    ss_e4m3_n64(acc, detail::gmma_desc_at(dq, off), detail::gmma_desc_at(dt, off));
  }
#pragma unroll
  for (int kk = 0; kk < DR / 16; ++kk)
    gmma::wgmma_ss_n64(acc, detail::gmma_desc_at(dqr, kk * 32), detail::gmma_desc_at(dtr, kk * 32));
  gmma::commit();
}

__device__ __forceinline__ void fence_acc(float (&acc)[2][kNH / 4]) {
#pragma unroll
  for (int q = 0; q < 2; ++q)
#pragma unroll
    for (int i = 0; i < kNH / 4; ++i) gmma::fence_operand(acc[q][i]);
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
  const uint32_t sQ8 = base, sQR = sQ8 + C::kQ8, sVt = sQR + C::kQR, sP = sVt + 2 * kVtHalf;
  const uint32_t sSt = sP + 2 * C::kP, sSmall = sSt + S * C::kStage;
  float* gam = reinterpret_cast<float*>(gbase + (sSmall - base));  // [2][64] by row
  float* fin = gam + 2 * kRows;                                     // [64][2]
  const uint32_t bar0 = sSmall + C::kSmall;  // stage full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const uint32_t sValid = bar0 + 16 * S;     // valid tokens of the tile in stage s (producer-written)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // A stage is released by every consumer warp: warpgroup 0's once S and s_k are read, the P.V
  // warpgroups' once their V^T half is written.
  init_stage_ring(bar0, S, 12);
  const int32_t* in = info + blockIdx.y * quant::kPartInfoInts;  // grid: detail::split_grid
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * kRows;

  if (warp >= 12) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (warp == 12 && lane == 0) produce_tiles<kDC, DR, S>(p, in, sSt, bar0, sValid);
    return;
  }
  // From lane 0 so that ptxas knows the role is warp-uniform.
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0), wiw = warp % 4;
  const int g = lane / 4, tq = lane % 4;
  const float neg_inf = -__int_as_float(0x7f800000);
  int lrow[2];  // the thread's two rows of the block (wgmma m64 accumulators in every role)
#pragma unroll
  for (int h = 0; h < 2; ++h) lrow[h] = 16 * wiw + g + 8 * h;
  int it = 0;
  if (wg == 0) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 136;\n" ::: "memory");
    int lim_off[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) lim_off[h] = p.s_q - 1 - min((row0 + lrow[h]) / p.heads, p.s_q - 1);
    const uint64_t dq0 = desc_sw(sQ8, 1024, 1), dqr0 = desc_sw(sQR, C::kRSbo, C::kRMode);
    // S of the tile in ring slot it_ into sv_ (issued and committed; a later wait<0> completes it).
    auto issue_s = [&](float (&sv_)[32], int it_) {
      const int stage_ = it_ % S;
      detail::mbar_wait(bar0 + 8 * stage_, (it_ / S) & 1);
      uint64_t dq = dq0, dqr = dqr0;
      asm volatile("" : "+l"(dq), "+l"(dqr));  // rebuilt per tile: hoisted over the loop they spill
      issue_s_tied<DR>(sv_, dq, dqr, sSt + stage_ * C::kStage);
    };
    if (detail::part_has_segment(in[0], in[1], end_b, end_t))
      issue_query<kDC, DR, kRows>(p, in[0], rows, row0, sQ8, sQR, threadIdx.x, 128);
    float sacc[32], sv[32];  // the S accumulators (the first k-step ignores their values)
#pragma unroll
    for (int i = 0; i < 32; ++i) sacc[i] = 0.f;
    for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
      const int L = p.seqlens[b];
      const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
      detail::cp_async_wait_all();  // this thread's chunks of the segment's query
      detail::fence_proxy_async();
      detail::named_bar_sync(kBarQ, 128);  // every chunk of it
      float rowf[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + lrow[h];
        rowf[h] = r < rows ? p.q_scale[static_cast<size_t>(b) * rows + r] * (p.scale * detail::kLog2e) : 0.f;
      }
      float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f}, sig[2] = {1.f, 1.f};
      // S of the next tile is issued at the start of each tile and waited for at its end, so the
      // tensor cores compute it under this tile's softmax, and each wgmma's issue and wait stay
      // inside one iteration (a wait at the loop's top for an S issued before its back edge made
      // ptxas serialise every wgmma, C7514 / C7515). sacc: the wgmma accumulators, one register
      // set; sv: the tile's S copied out of them once complete.
      auto take_s = [&] {
        gmma::wait<0>();
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          gmma::fence_operand(sacc[i]);
          sv[i] = sacc[i];
          gmma::fence_operand(sacc[i]);
        }
      };
      if (t < stop) {
        issue_s(sacc, it);
        take_s();
      }
      for (int ti = t; ti < stop; ++ti, ++it) {
        const bool has_next = ti + 1 < stop;
        if (has_next && !(probe & 8)) issue_s(sacc, it + 1);
        const int stage = it % S;
        const int j0 = ti * kT;
        float skv[16], gm[2], inv[2];
        int lim[2];
        softmax_inputs<kDC, DR>(sSt + stage * C::kStage, sValid + 4 * stage, j0, L, lim_off, tq, skv, lim);
        __syncwarp();  // then the stage is free for us
        if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
        if (probe & 2) { gm[0] = gm[1] = inv[0] = inv[1] = 1.f; l_run[0] += skv[0]; }
        else softmax_tile_any(sv, skv, lim, j0, tq, rowf, m_run, l_run, sig, gm, inv);
        const int pb = it & 1;
        detail::named_bar_sync(kBarFree + pb, kConsumers);  // the P.V of tile it - 2 is done with buffer pb
        store_p8t(sv, inv, sP + pb * C::kP, lrow, tq);
        if (tq == 0) {
          gam[pb * kRows + lrow[0]] = gm[0];
          gam[pb * kRows + lrow[1]] = gm[1];
        }
        detail::fence_proxy_async();  // P8 (generic stores) is read by wgmma (async proxy)
        detail::named_bar_arrive(kBarFull + pb, kConsumers);
        take_s();  // S of the next tile (a no-op wait on the last)
      }
      if (detail::part_has_segment(b + 1, 0, end_b, end_t))  // the next segment's query: this one's S are done
        issue_query<kDC, DR, kRows>(p, b + 1, rows, row0, sQ8, sQR, threadIdx.x, 128);
      // ---- epilogue: 1/l and lse = (m + log2(sigma l)) ln 2 of the thread's two rows ----
      if (b != in[0]) detail::named_bar_sync(kBarFinFree, kConsumers);  // warpgroups 1-2 stored the last segment
      write_fin(fin, lrow, m_run, l_run, sig, tq);
      detail::named_bar_arrive(kBarFin, kConsumers);
    }
    // the last phase of each P8 buffer that warpgroups 1-2 opened
    detail::named_bar_sync(kBarFree, kConsumers);
    detail::named_bar_sync(kBarFree + 1, kConsumers);
    return;
  }
  // ---- warpgroups 1 and 2: O [rows x their 256 channels] ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 176;\n" ::: "memory");
  detail::named_bar_arrive(kBarFree, kConsumers);  // both P8 buffers start free
  detail::named_bar_arrive(kBarFree + 1, kConsumers);
  const int half = wg - 1;
  const uint32_t vt = sVt + half * kVtHalf;
  const uint64_t dv = desc_sw(vt, 512, 2);  // B = V^T of this warpgroup's channels
  int pending = -1;                           // the tile whose P8 buffer this warpgroup still has to free
  int split = in[4];
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(p.seqlens[b], kT);
    const int n_split = offsets[b + 1] - offsets[b];
    float acc[2][kNH / 4];  // channels 128 q + 8 j + 2 tq + e of rows h in acc[q][4 j + 2 h + e]
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int i = 0; i < kNH / 4; ++i) acc[q][i] = 0.f;
    for (int ti = t; ti < stop; ++ti, ++it) {
      gmma::wait<0>();  // the P.V of the previous tile: done with V^T and its P8 buffer
      fence_acc(acc);
      if (pending >= 0) detail::named_bar_arrive(kBarFree + (pending & 1), kConsumers);
      pending = it;
      const int stage = it % S, pb = it & 1;
      const uint32_t st = sSt + stage * C::kStage;
      detail::mbar_wait(bar0 + 8 * stage, (it / S) & 1);
      const int valid = static_cast<int>(lds32(sValid + 4 * stage));
      if (probe & 1) {}
      else if (valid == kT) transpose_half<false>(st, vt, 16 * half, wiw, lane, valid);
      else transpose_half<true>(st, vt, 16 * half, wiw, lane, valid);
      detail::fence_proxy_async();  // V^T is read by wgmma (async proxy)
      __syncwarp();
      if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
      detail::named_bar_sync(kBarVt + half, 128);  // every warp's V^T units
      detail::named_bar_sync(kBarFull + pb, kConsumers);  // P8 and gamma of the tile
      const float g0 = gam[pb * kRows + lrow[0]], g1 = gam[pb * kRows + lrow[1]];
      if (!(probe & 16))
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int i = 0; i < kNH / 4; ++i) acc[q][i] *= ((i >> 1) & 1) ? g1 : g0;
      const uint64_t dp = desc_sw(sP + pb * C::kP, 1024, 1);
      fence_acc(acc);
      gmma::fence();
      if (!(probe & 4))
#pragma unroll
      for (int ks = 0; ks < 2; ++ks)
#pragma unroll
        for (int q = 0; q < 2; ++q)
          ss_e4m3_n128(acc[q], detail::gmma_desc_at(dp, 32 * ks), detail::gmma_desc_at(dv, q * 8192 + 32 * ks));
      gmma::commit();
    }
    gmma::wait<0>();
    fence_acc(acc);
    if (pending >= 0) detail::named_bar_arrive(kBarFree + (pending & 1), kConsumers);
    pending = -1;
    // ---- store: bf16 output (one split) or the split's fp32 partial + LSE ----
    detail::named_bar_sync(kBarFin, kConsumers);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lrow[h];
      if (r >= rows) continue;
      const float inv = fin[2 * lrow[h]], lse = fin[2 * lrow[h] + 1];
      const int col0 = half * kNH + 2 * tq;
      const bool with_lse = half == 0 && tq == 0;
      if (n_split == 1) {
        uint16_t* dst = p.out + (static_cast<size_t>(b) * rows + r) * kDC + col0;
#pragma unroll
        for (int j = 0; j < kNH / 8; ++j)
          *reinterpret_cast<uint32_t*>(dst + 8 * j) =
              detail::pack_bf16(acc[j >> 4][4 * (j & 15) + 2 * h] * inv, acc[j >> 4][4 * (j & 15) + 2 * h + 1] * inv);
        if (with_lse) p.lse[static_cast<size_t>(b) * rows + r] = lse;
      } else {
        float* dst = o_acc + (static_cast<size_t>(split) * rows + r) * kDC + col0;
#pragma unroll
        for (int j = 0; j < kNH / 8; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j) =
              make_float2(acc[j >> 4][4 * (j & 15) + 2 * h] * inv, acc[j >> 4][4 * (j & 15) + 2 * h + 1] * inv);
        if (with_lse) lse_acc[static_cast<size_t>(split) * rows + r] = lse;
      }
    }
    if (detail::part_has_segment(b + 1, 0, end_b, end_t)) detail::named_bar_arrive(kBarFinFree, kConsumers);  // fin read
  }
}

template <int DR>
void launch_cfg(const quant::Fp8DecodeParams& p, const detail::Workspace& w, int parts, cudaStream_t stream) {
  static cuda::SmemLimitSet smem_set;
  const size_t smem = WCfg<DR>::smem();
  cuda::set_smem_limit_once(wide_split_kernel<DR>, smem, smem_set, "fp8 wide decode split kernel smem limit");
  const dim3 grid = detail::split_grid(parts, quant::fp8_decode_row_blocks(p));
  // MLA_WIDE_PROBE (session 17, call 5; timing only, results wrong): 1 no V^T transposition, 2 no
  // softmax, 4 no P.V wgmmas, 8 no S after each segment's first, 16 no O rescale.
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
