// The many-head path (> 16 query rows, d_c >= 128, d_c + d_r <= 576; v6): wgmma, 64-row
// blocks, 64-token tiles, the two consumer warpgroups splitting the d_c output columns.
// FlashMLA's division of work (its first version): warpgroup 0 computes the whole
// S = Q K^T of a 64-token tile (wgmma m64n64k16, Q and K from shared memory), runs the online
// softmax (publishing the rows' rescale factors right after the row max, named barrier 6, so
// both warpgroups rescale O during the exponentials), issues O += P V for its half of the d_c
// output columns with P from registers (wgmma m64n(d_c/2)k16 RS, B = V from shared memory), then
// writes P (bf16, the wgmma K-major swizzled layout) to shared memory, from where warpgroup 1
// issues its half (A = P from shared memory). Neither waits for its P.V: warpgroup 0's S of the
// next tile queues behind the two P.V on the tensor cores. No fp32 S exchange, three named
// barriers per 64 tokens. K tiles: 2-stage ring (3 at d_c = 256) of one TMA box (64 columns x 64
// tokens, 128-byte swizzle) per 64-column block; rows past L zeroed before use.
// Rounding points as the twin with 64-token tiles and the running-max slack
// (quant::decode_tile_config_for). Where the parts hold whole requests (v6_fuses_merge) no
// combine launch follows: the CTA that stores the last split of a request's row block merges it
// (decode_store.cuh: take_merge_ticket, merge_request).
#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/decode_softmax.cuh"
#include "kernels/decode_store.cuh"
#include "kernels/setmaxnreg.cuh"
#include "kernels/timeline.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::detail {
#ifdef MLA_TIMELINE
__device__ uint64_t g_v6_timeline[timeline::kWarps * timeline::kEvents];
#endif
namespace {

using quant::kPartInfoInts;
constexpr int kTileTokens = 64;  // tokens per K tile (the twin's tile on this path)

// Ring stages: 2 at d_c = 512 (all that fits next to Q and P), 3 at d_c = 256 (fits with
// d_r <= 128). The third stage was meant to hide load latency (a stage is held from its
// tile's arrival until both warpgroups' P V of it are done); on an H200 the TPLA tp=4 rank
// (H=64 d_c=256, 32K) measured 729-757 us with 3 against 741-801 with 2: within run-to-run
// noise. d_c = 128 keeps 2 (no GPU test runs v6 at d_c = 128 with 17..64 rows).
template <int DC>
constexpr int kV6Stages = DC == 256 ? 3 : 2;

template <int DC>
struct V6Cfg {
  static constexpr int kNHalf = DC / 2;     // O columns per warpgroup
  static constexpr int kOReg = kNHalf / 2;  // fp32 accumulators per thread
  // 1 KB alignment slack, Q, the ring, P (64 x 64 bf16), 3 x 64 row floats, mbarriers.
  static constexpr size_t smem_bytes(int dim) {
    const size_t nblk = (static_cast<size_t>(dim) + 63) / 64;
    return 1024 + nblk * 8192 + kV6Stages<DC> * nblk * 8192 + 8192 + 3 * 64 * 4 + 256;
  }
};

// Registers a thread (setmaxnreg): the producer warpgroup, each of the two consumer warpgroups.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kProducerRegs + 2 * kConsumerRegs <= detail::setmaxnreg_budget(kWgmmaThreads),
              "setmaxnreg asks for more registers than the launch allocates");

template <int DC>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    decode_split_v6_kernel(const __grid_constant__ CUtensorMap kv_map, const quant::Bf16DecodeParams p,
                           const int32_t* __restrict__ info, const int32_t* __restrict__ offsets,
                           float* __restrict__ o_acc, float* __restrict__ lse_acc, int32_t* __restrict__ merge_cnt,
                           const bool fuse_merge) {
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
  float* sScale = reinterpret_cast<float*>(gbase + (sP - base) + 8192);  // [64] alpha of the tile (barrier 6)
  float* sInvL = sScale + 64;                                            // [64] 1 / l (epilogue)
  float* sLse = sInvL + 64;                                              // [64] (epilogue)
  const uint32_t bar0 = smem_u32(sLse + 64);  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  volatile int* merge_flag = reinterpret_cast<int*>(sLse + 64 + 4 * S);  // after the mbarriers (in the 256 B)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  MLA_TL_INIT(g_v6_timeline);
  init_ring(bar0, S);
  MLA_TL_SPAN(0);
  const int32_t* in = info + blockIdx.y * kPartInfoInts;  // grid: split_grid (row blocks, parts)
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * 64;

  if (warp >= 8) {  // ---- producer warpgroup: one thread issues the TMA loads ----
    detail::setmaxnreg_dec<kProducerRegs, kWgmmaThreads>();
    if (warp == 8 && lane == 0) produce_tiles<kTileTokens, S>(p, &kv_map, in, sK, stage_bytes, nblk, bar0);
    return;
  }
  // ---- consumers: warpgroup 0 (S, softmax, P, first half of O), warpgroup 1 (second half) ----
  detail::setmaxnreg_inc<kConsumerRegs, kWgmmaThreads>();
  const int wg = warp / 4, wiw = warp % 4;
  const int g = lane / 4, tq = lane % 4;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  int lrow[2], lim_off[2];  // this thread's two rows in the block, and their causal offsets
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lrow[h] = wiw * 16 + g + 8 * h;
    const int tok = min((row0 + lrow[h]) / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  int split = in[4];
  int it = 0;
  int merge_b0 = -1, merge_b1 = -1;  // requests whose last split this CTA stored (at most its first and last)
  // Warpgroup 0 alone reads Q (S). It loads each segment's Q block with cp.async: the first
  // segment's here, every later one's as the segment before ends (its last S is complete), so the
  // load runs under that segment's last P.V and epilogue instead of stalling both warpgroups at
  // the next start. (Issued inside the tile loop, after the last tile's S, it measured 1-2%
  // slower on long requests; docs/gpu-notes.md, session 14.)
  if (wg == 0 && part_has_segment(begin_b, begin_t, end_b, end_t)) issue_q_rows(p, begin_b, row0, sQ, threadIdx.x, 128);
  for (int b = begin_b, t = begin_t; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kTileTokens);
    const int n_split = offsets[b + 1] - offsets[b];
    const bool next_segment = part_has_segment(b + 1, 0, end_b, end_t);
    named_bar_sync(1, 256);  // the previous segment's epilogue is done with the row floats
    if (wg == 0) {
      cp_async_wait_all();  // this thread's chunks of the segment's Q
      fence_proxy_async();
      named_bar_sync(7, 128);  // every chunk of it
    }
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};  // warpgroup 0 only
    float acc[C::kOReg];
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) acc[i] = 0.f;
    int pending = -1;  // tile counter of the stage this warp still has to release
    float sv[32];      // warpgroup 0: S, then P (fp32) of the current tile
    // Warpgroup 0: waits for tile ti_'s stage and zeroes its rows past L (pages past L may hold
    // NaN, which must not reach P.V; a bad page id's tile arrives zero-filled).
    auto wait_tile = [&](int it_, int ti_) -> uint32_t {
      const uint32_t tile_ = sK + (it_ % S) * stage_bytes;
      mbar_wait(bar0 + 8 * (it_ % S), (it_ / S) & 1);
      MLA_TL(2);  // warpgroup 0: the tile landed
      const int valid = tile_rows_in_length<kTileTokens>(L, ti_);
      if (valid < kTileTokens) {
        zero_tail_rows<kTileTokens>(tile_, valid, nblk, threadIdx.x, 128);
        named_bar_sync(2, 128);
      }
      return tile_;
    };
    auto release = [&](int it_) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + it_ % S));
    };
    for (int ti = t; ti < stop; ++ti, ++it) {
      const uint32_t tile_v = sK + (it % S) * stage_bytes + wg * (DC / 128) * 8192;  // this warpgroup's V columns
      // O = O * alpha (this warpgroup's P.V of the previous tile is complete).
      auto rescale = [&](const float (&alpha_)[2]) {
        if (alpha_[0] != 1.f || alpha_[1] != 1.f) {
#pragma unroll
          for (int i = 0; i < C::kOReg; ++i) acc[i] *= alpha_[(i >> 1) & 1];
        }
      };
      // O += P V over this warpgroup's d_c / 2 columns, issued as one commit group (not waited
      // for); mma(ks, dv) issues k-step ks with V's descriptor dv.
      auto issue_pv = [&](auto mma) {
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
        gmma::fence();
        const uint64_t dv0 = gmma_desc(tile_v, 8192, 1024);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) mma(ks, gmma_desc_at(dv0, ks * 2048));
        gmma::commit();
      };
      float alpha[2] = {1.f, 1.f};
      if (wg == 0) {
        const int j0 = ti * kTileTokens;
        MLA_TL(0);  // tile start
        gmma::wait<0>();  // this warpgroup's P.V of the previous tile is done
        MLA_TL(1);
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
        if (pending >= 0) release(pending);
        pending = -1;
        compute_s64_dc<DC>(sv, sQ, wait_tile(it, ti), nk);
        MLA_TL(3);  // S done
        float m_use[2];
        softmax_max(sv, j0, L, lim_off, tq, scale_log2, m_run, m_use, alpha);
        MLA_TL(4);  // row max and factors
        // The rows' factors go to warpgroup 1 as soon as they are known, so that both
        // warpgroups rescale O while this one computes the exponentials.
        if (tq == 0) {
          sScale[lrow[0]] = alpha[0];
          sScale[lrow[1]] = alpha[1];
        }
        named_bar_arrive(6, 256);
        rescale(alpha);
        softmax_exp(sv, m_use, alpha, l_run);
        MLA_TL(5);  // O rescaled, exponentials
        // P as wgmma A fragments (one per 16-token k-step): this warpgroup's P.V is issued from
        // registers now, before P is handed to warpgroup 1, so the tensor cores start on it
        // while P is stored.
        uint32_t pa[4][4];
        pack_p_fragments(sv, pa);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
          for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
        issue_pv([&](int ks, uint64_t dv) {
          if constexpr (C::kNHalf == 256) gmma::wgmma_rs_n256(acc, pa[ks], dv);
          else if constexpr (C::kNHalf == 128) gmma::wgmma_rs_n128(acc, pa[ks], dv);
          else gmma::wgmma_rs_n64(acc, pa[ks], dv);
        });
        MLA_TL(6);  // P.V issued
        named_bar_sync(3, 256);  // P buffer free: both warpgroups' P.V of the previous tile are done
        MLA_TL(7);
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = lrow[h];
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sP + r * 128 + ((n ^ (r & 7)) << 4) + 4 * tq),
                         "r"(pa[n >> 1][(n & 1) * 2 + h])
                         : "memory");
          }
        fence_proxy_async();  // P (generic stores) is read by wgmma (async proxy)
        named_bar_sync(4, 256);
        MLA_TL(8);  // P handed over
      } else {
        MLA_TL(10);  // tile start
        gmma::wait<0>();  // this warpgroup's P.V of the previous tile is done
        MLA_TL(11);
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
        if (pending >= 0) release(pending);
        pending = -1;
        named_bar_sync(6, 256);  // the tile's row factors are in shared memory
        MLA_TL(12);
        alpha[0] = sScale[lrow[0]];
        alpha[1] = sScale[lrow[1]];
        rescale(alpha);
        MLA_TL(13);
        named_bar_sync(3, 256);
        MLA_TL(14);
        named_bar_sync(4, 256);  // P and the zeroed tail rows are visible
        MLA_TL(15);
        const uint64_t dp0 = gmma_desc(sP, 16, 1024);
        issue_pv([&](int ks, uint64_t dv) {
          const uint64_t da = gmma_desc_at(dp0, ks * 32);
          if constexpr (C::kNHalf == 256) gmma::wgmma_ss_n256_tb(acc, da, dv);
          else if constexpr (C::kNHalf == 128) gmma::wgmma_ss_n128_tb(acc, da, dv);
          else gmma::wgmma_ss_n64_tb(acc, da, dv);
        });
        MLA_TL(16);  // P.V issued
      }
      pending = it;  // not waited for here: released once this warpgroup's next wgmma.wait covers it
    }
    // ---- epilogue ----
    if (wg == 0 && next_segment) issue_q_rows(p, b + 1, row0, sQ, threadIdx.x, 128);  // Q is free since the last S
    gmma::wait<0>();
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
    if (pending >= 0) release(pending);
    if (wg == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (tq == 0) {
          sInvL[lrow[h]] = l > 0.f ? 1.f / l : 0.f;
          sLse[lrow[h]] = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
        }
      }
    }
    named_bar_sync(5, 256);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lrow[h];
      if (r >= rows) continue;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, wg * C::kNHalf + 2 * tq, C::kNHalf / 8,
                [&](int n) { return make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]); }, sInvL[lrow[h]],
                sLse[lrow[h]], wg == 0 && tq == 0);
    }
    // The combine, fused (fuse_merge: v6_fuses_merge): the CTA that stores the last split of this
    // row block of request b merges it once the tile loop is over (a counter per request and row
    // block).
    if (fuse_merge && n_split > 1 &&
        take_merge_ticket(merge_cnt, b * gridDim.x + blockIdx.x, n_split, threadIdx.x, 256, 8, merge_flag)) {
      if (merge_b0 < 0) merge_b0 = b;
      else merge_b1 = b;
    }
  }
  named_bar_sync(5, 256);  // the last epilogue is done with sLse
  if (merge_b0 >= 0)
    merge_request<DC, 64, 256, 16>(p, o_acc, lse_acc, offsets, merge_b0, rows, row0, threadIdx.x, sLse, 9);
  if (merge_b1 >= 0)
    merge_request<DC, 64, 256, 16>(p, o_acc, lse_acc, offsets, merge_b1, rows, row0, threadIdx.x, sLse, 9);
  MLA_TL_SPAN(1);
}

template <int DC>
void launch_for_dc(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  static cuda::SmemLimitSet attr_set;
  auto kernel = decode_split_v6_kernel<DC>;
  cuda::set_smem_limit_once(kernel, kMaxSmemPerBlock, attr_set,
                            "mla decode split kernel (many-head path v6) smem limit");
  launch(kernel, split_grid(p.num_parts, row_blocks), dim3(kWgmmaThreads), V6Cfg<DC>::smem_bytes(DC + p.d_r), stream,
         false, "split kernel (v6) launch", make_kv_map(p, kTileTokens), p,
         static_cast<const int32_t*>(w.info), static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc, w.merge_cnt,
         v6_fuses_merge(p));
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

#ifdef MLA_TIMELINE
void v6_timeline(uint64_t* host, cudaStream_t stream) {
  timeline::transfer(g_v6_timeline, host, stream, "v6 timeline");
}
#endif

}  // namespace mla::kernels::detail
