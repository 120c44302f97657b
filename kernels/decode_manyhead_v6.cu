// The many-head path (> 16 query rows, d_c >= 128, d_c + d_r <= 576; v6): wgmma, 64-row
// blocks, 64-token tiles, the two consumer warpgroups splitting the d_c output columns (O: 64 x
// d_c / 2 fp32 in each warpgroup's registers).
// Schedule (a two-tile step in the spirit of FlashMLA's 'seesaw', keeping the twin's rounding
// order): tiles go in pairs (T0, T1). Warpgroup 0 computes S = Q K^T of T0 (wgmma m64n64k16 from
// shared memory), warpgroup 1 that of T1, at the same time. Warpgroup 0 runs T0's online softmax
// and publishes P0 (bf16, the wgmma K-major swizzled layout), the row max m and T0's factor a0;
// then both issue O = O a0 + P0 V0 on their half of the columns (warpgroup 0 with P0 from
// registers) while warpgroup 1 runs T1's softmax (from m) on the CUDA cores. Warpgroup 1 then
// publishes P1 and a1 (once its read of P0 is done: one P buffer), and both issue
// O = O a1 + P1 V1. So each softmax runs under tensor-core work of the other warpgroup, S of the
// two tiles is split between the warpgroups, and the rounding points are the twin's per tile
// (P rounded to bf16 once, O rescaled by each tile's factor before that tile's P V).
// Each warpgroup keeps its share of the row sum l (scaled by both factors); the epilogue adds
// the two. K tiles: 2-stage ring of one TMA box (64 columns x 64 tokens, 128-byte swizzle) per
// 64-column block, released by each warp after its last wgmma reading it; rows past L zeroed by
// the warpgroup that computes the tile's S, published to the other by the P barrier.
// Rounding points as the twin with 64-token tiles (quant::decode_tile_config_for).
#include <type_traits>

#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/decode_softmax.cuh"
#include "kernels/decode_store.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::detail {
namespace {

using quant::kPartInfoInts;
constexpr int kTileTokens = 64;  // tokens per K tile (the twin's tile on this path)

// Ring stages: as many 64-token tiles as shared memory holds next to Q and P at the largest
// d_r the path takes for that d_c (d_c + d_r <= 576): 2 at d_c = 512, 3 at 256, 5 at 128. The
// loads are latency-bound (a tile's stage is held from its arrival until both warpgroups' P V
// of it are done), so every extra stage in flight counts.
template <int DC>
constexpr int kV6Stages = DC == 512 ? 2 : DC == 256 ? 3 : 5;
// Named barriers (0 is __syncthreads): Q reload, each warpgroup's tail zeroing, P0 / P1 ready,
// epilogue row sums.
constexpr int kBarQ = 1, kBarZero0 = 2, kBarP0 = 3, kBarP1 = 4, kBarEpi = 5, kBarZero1 = 6;

template <int DC>
struct V6Cfg {
  static constexpr int kNHalf = DC / 2;     // O columns per warpgroup
  static constexpr int kOReg = kNHalf / 2;  // fp32 accumulators per thread
  // 1 KB alignment slack, Q, the ring, P (64 x 64 bf16), 5 x 64 row floats, mbarriers.
  static constexpr size_t smem_bytes(int dim) {
    const size_t nblk = (static_cast<size_t>(dim) + 63) / 64;
    return 1024 + nblk * 8192 + kV6Stages<DC> * nblk * 8192 + 8192 + 5 * 64 * 4 + 256;
  }
};

template <int DC>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    decode_split_v6_kernel(const CUtensorMap* kv_map, const quant::Bf16DecodeParams p,
                           const int32_t* __restrict__ info, const int32_t* __restrict__ offsets,
                           float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = V6Cfg<DC>;
  constexpr int S = kV6Stages<DC>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const int dim = DC + p.d_r;
  const int nblk = (dim + 63) / 64;
  const int nk = dim / 16;
  const uint32_t stage_bytes = nblk * 8192;
  const uint32_t sQ = base;
  const uint32_t sK = sQ + nblk * 8192;
  const uint32_t sP = sK + S * stage_bytes;
  float* sM = reinterpret_cast<float*>(gbase + (sP - base) + 8192);  // [64] row max after the last published tile
  float* sA0 = sM + 64;   // [64] factor of the pair's first tile (warpgroup 0 -> 1)
  float* sA1 = sA0 + 64;  // [64] factor of the pair's second tile (warpgroup 1 -> 0)
  float* sL = sA1 + 64;   // [2][64] each warpgroup's row sum (epilogue)
  const uint32_t bar0 = smem_u32(sL + 128);  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_ring(bar0, S);
  const int32_t* in = info + blockIdx.x * kPartInfoInts;
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.y * 64;

  if (warp >= 8) {  // ---- producer warpgroup: one thread issues the TMA loads ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8 && lane == 0) produce_tiles<kTileTokens, S>(p, kv_map, in, sK, stage_bytes, nblk, bar0);
    return;
  }
  // ---- consumers: warpgroup wg owns O columns [wg d_c / 2, (wg + 1) d_c / 2) ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int wg = warp / 4, wiw = warp % 4, tid = threadIdx.x % 128;
  const int g = lane / 4, tq = lane % 4;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  const uint32_t v_half = wg * (DC / 128) * 8192;  // this warpgroup's V columns within a stage
  int lrow[2], lim_off[2];  // this thread's two rows in the block, and their causal offsets
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lrow[h] = wiw * 16 + g + 8 * h;
    const int tok = min((row0 + lrow[h]) / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  int split = in[4];
  int it = 0;
  for (int b = begin_b, t = begin_t; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kTileTokens);
    const int n_split = offsets[b + 1] - offsets[b];
    named_bar_sync(kBarQ, 256);  // the previous segment is done with Q and the row floats
    load_q_rows(p, b, row0, sQ, threadIdx.x, 256);
    named_bar_sync(kBarQ, 256);
    // m: the row max, the same in both warpgroups (passed through sM with each tile's P);
    // l: this warpgroup's share of the row sum (this thread's columns of S).
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kOReg];
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) acc[i] = 0.f;
    float sv[32];       // S of this warpgroup's tile (read-only after the wgmma)
    uint32_t pa[4][4];  // P as wgmma A fragments (bf16), one per 16-token k-step
    // Waits for tile ti_'s stage and zeroes its rows past L with this warpgroup's threads
    // (pages past L may hold NaN, which must not reach P V; a bad page id's tile arrives
    // zero-filled). The other warpgroup sees the zeros through the P barrier.
    auto wait_tile = [&](int it_, int ti_) -> uint32_t {
      const uint32_t tile_ = sK + (it_ % S) * stage_bytes;
      mbar_wait(bar0 + 8 * (it_ % S), (it_ / S) & 1);
      const int valid = tile_rows_in_length<kTileTokens>(L, ti_);
      if (valid < kTileTokens) {
        zero_tail_rows<kTileTokens>(tile_, valid, nblk, tid, 128);
        named_bar_sync(wg == 0 ? kBarZero0 : kBarZero1, 128);
      }
      return tile_;
    };
    auto release = [&](int it_) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + it_ % S));
    };
    // P (bf16 A fragments, pa) into the shared P buffer for the other warpgroup.
    auto publish_p = [&]() {
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = lrow[h];
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sP + r * 128 + ((n ^ (r & 7)) << 4) + 4 * tq),
                       "r"(pa[n >> 1][(n & 1) * 2 + h])
                       : "memory");
        }
    };
    auto scale_o = [&](const float (&a)[2]) {
      if (a[0] != 1.f || a[1] != 1.f) {
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) acc[i] *= a[(i >> 1) & 1];
      }
    };
    auto fence_acc = [&]() {
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
    };
    // O += P V over this warpgroup's columns of `tile`, P from registers (pa), one commit group.
    auto issue_pv_reg = [&](uint32_t tile) {
      fence_acc();
      gmma::fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t dv = gmma_desc(tile + v_half + ks * 2048, 8192, 1024);
        if constexpr (C::kNHalf == 256) gmma::wgmma_rs_n256(acc, pa[ks], dv);
        else if constexpr (C::kNHalf == 128) gmma::wgmma_rs_n128(acc, pa[ks], dv);
        else gmma::wgmma_rs_n64(acc, pa[ks], dv);
      }
      gmma::commit();
    };
    // The same with P from the shared P buffer (the other warpgroup's tile).
    auto issue_pv_smem = [&](uint32_t tile) {
      fence_acc();
      gmma::fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t da = gmma_desc(sP + ks * 32, 16, 1024);
        const uint64_t dv = gmma_desc(tile + v_half + ks * 2048, 8192, 1024);
        if constexpr (C::kNHalf == 256) gmma::wgmma_ss_n256_tb(acc, da, dv);
        else if constexpr (C::kNHalf == 128) gmma::wgmma_ss_n128_tb(acc, da, dv);
        else gmma::wgmma_ss_n64_tb(acc, da, dv);
      }
      gmma::commit();
    };
    auto wait_pv = [&]() {
      gmma::wait<0>();
      fence_acc();
    };
    // One step of warpgroup 0 on tiles (ti_, ti_ + 1) at ring positions (it_, it_ + 1); TWO:
    // whether the second tile exists (the last step of an odd run has one). Every wgmma group is
    // waited for inside the step (no accumulator in flight across a branch or the loop edge,
    // which would make ptxas serialise the wgmma pipeline).
    auto step_wg0 = [&](auto two, int ti_, int it_) {
      constexpr bool TWO = decltype(two)::value;
      const uint32_t tile0 = sK + (it_ % S) * stage_bytes;
      compute_s64(sv, sQ, wait_tile(it_, ti_), nk);
      float a0[2];
      softmax_tile_packed(sv, ti_ * kTileTokens, L, lim_off, tq, scale_log2, m_run, l_run, a0, pa);
      publish_p();  // the P buffer is free: this warpgroup's last P V from it was waited for
      if (tq == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          sM[lrow[h]] = m_run[h];
          sA0[lrow[h]] = a0[h];
        }
      }
      fence_proxy_async();  // P (generic stores) is read by wgmma (async proxy)
      named_bar_arrive(kBarP0, 256);
      scale_o(a0);
      issue_pv_reg(tile0);
      wait_pv();
      release(it_);
      if constexpr (TWO) {
        named_bar_sync(kBarP1, 256);  // P1, a1 and m after T1 are in shared memory
        float a1[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          a1[h] = sA1[lrow[h]];
          m_run[h] = sM[lrow[h]];
          l_run[h] *= a1[h];
        }
        scale_o(a1);
        issue_pv_smem(sK + ((it_ + 1) % S) * stage_bytes);
        wait_pv();
        release(it_ + 1);
      }
    };
    auto step_wg1 = [&](auto two, int ti_, int it_) {
      constexpr bool TWO = decltype(two)::value;
      const uint32_t tile0 = sK + (it_ % S) * stage_bytes;
      if constexpr (TWO) compute_s64(sv, sQ, wait_tile(it_ + 1, ti_ + 1), nk);
      named_bar_sync(kBarP0, 256);  // P0, a0, m after T0 and T0's zeroed tail are visible
      float a0[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        a0[h] = sA0[lrow[h]];
        m_run[h] = sM[lrow[h]];
        l_run[h] *= a0[h];
      }
      scale_o(a0);
      issue_pv_smem(tile0);  // in flight during T1's softmax
      if constexpr (TWO) {
        float a1[2];
        // S stays unwritten while P0 V0 is in flight (softmax_tile_packed says why).
        softmax_tile_packed(sv, (ti_ + 1) * kTileTokens, L, lim_off, tq, scale_log2, m_run, l_run, a1, pa);
        wait_pv();  // the P buffer (P0) is no longer read, T0 no longer needed here
        release(it_);
        publish_p();
        if (tq == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            sM[lrow[h]] = m_run[h];
            sA1[lrow[h]] = a1[h];
          }
        }
        fence_proxy_async();
        named_bar_arrive(kBarP1, 256);
        scale_o(a1);
        issue_pv_reg(sK + ((it_ + 1) % S) * stage_bytes);
        wait_pv();
        release(it_ + 1);
      } else {
        wait_pv();
        release(it_);
      }
    };
    int ti = t;
    if (wg == 0) {
      for (; ti + 1 < stop; ti += 2, it += 2) step_wg0(std::true_type{}, ti, it);
      if (ti < stop) step_wg0(std::false_type{}, ti, it++);
    } else {
      for (; ti + 1 < stop; ti += 2, it += 2) step_wg1(std::true_type{}, ti, it);
      if (ti < stop) step_wg1(std::false_type{}, ti, it++);
    }
    // ---- epilogue: l = the two warpgroups' shares; m is the same in both ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if (tq == 0) sL[wg * 64 + lrow[h]] = l;
    }
    named_bar_sync(kBarEpi, 256);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lrow[h];
      if (r >= rows) continue;
      const float l = sL[lrow[h]] + sL[64 + lrow[h]];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, wg * C::kNHalf + 2 * tq, C::kNHalf / 8,
                [&](int n) { return make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]); }, inv, lse,
                wg == 0 && tq == 0);
    }
  }
}

template <int DC>
void launch_for_dc(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  static bool attr_set = false;
  auto kernel = decode_split_v6_kernel<DC>;
  set_smem_limit_once(kernel, kMaxSmemPerBlock, attr_set, "cudaFuncSetAttribute(many-head path v6)");
  launch(kernel, dim3(p.num_parts, row_blocks), dim3(kWgmmaThreads), V6Cfg<DC>::smem_bytes(DC + p.d_r), stream, false,
         "split kernel (v6) launch", static_cast<const CUtensorMap*>(w.map), p, static_cast<const int32_t*>(w.info),
         static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc);
}

}  // namespace

void launch_manyhead_v6(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  switch (p.d_c) {
    case 128: launch_for_dc<128>(p, w, row_blocks, stream); break;
    case 256: launch_for_dc<256>(p, w, row_blocks, stream); break;
    case 512: launch_for_dc<512>(p, w, row_blocks, stream); break;
    default: throw InputError("mla decode params: d_c = " + std::to_string(p.d_c) + " on the v6 path");
  }
}

}  // namespace mla::kernels::detail
