// The TPLA-slice path (> 64 query rows at d_c <= 256, d_c + d_r <= 320; v7): wgmma, 128-row
// blocks, 64-token tiles.
// Each consumer warpgroup owns 64 rows and the whole d_c (O: 64 x d_c fp32 in registers), so
// the two warpgroups never exchange anything: each runs S = Q K^T (wgmma m64n64k16 from shared
// memory), the online softmax, and O += P V with P from registers (wgmma m64n(d_c)k16, V
// MN-major) on the same K tile. Each issues P.V of tile i and S of tile i + 1 back to back and
// waits once, and the two take turns issuing (two named barriers), so one warpgroup's softmax
// runs under the other's wgmmas (FlashAttention-3's ping-pong; without the turns both ran in
// step, docs/gpu-notes.md). One K tile (64 tokens, 3-stage TMA ring) feeds 128 rows, so a TPLA
// rank reads its half-size cache once instead of once per 64-row block (v6). Tile 64 as v6 and
// the twin.
#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/decode_softmax.cuh"
#include "kernels/decode_store.cuh"
#include "kernels/setmaxnreg.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::detail {
namespace {

using quant::kPartInfoInts;
constexpr int kTileTokens = 64;  // tokens per K tile (the twin's tile on this path)

constexpr int kV7Stages = 3;
// Named barriers: 1 + wg (Q load), 3 + wg (zeroed tail rows), kTurn + wg (turn order).
constexpr int kTurn = 5;

template <int DC>
struct V7Cfg {
  static constexpr int kOReg = DC / 2;  // fp32 accumulators per thread: 64 x DC / 128
  // 1 KB alignment slack, Q (two 64-row halves), the ring, mbarriers.
  static constexpr size_t smem_bytes(int dim) {
    const size_t nblk = (static_cast<size_t>(dim) + 63) / 64;
    return 1024 + 2 * nblk * 8192 + kV7Stages * nblk * 8192 + 256;
  }
};

// Registers a thread (setmaxnreg): the producer warpgroup, each of the two consumer warpgroups.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kProducerRegs + 2 * kConsumerRegs <= detail::setmaxnreg_budget(kWgmmaThreads),
              "setmaxnreg asks for more registers than the launch allocates");

template <int DC>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    decode_split_v7_kernel(const __grid_constant__ CUtensorMap kv_map, const quant::Bf16DecodeParams p,
                           const int32_t* __restrict__ info, const int32_t* __restrict__ offsets,
                           float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = V7Cfg<DC>;
  constexpr int S = kV7Stages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const int dim = DC + p.d_r;
  const int nblk = (dim + 63) / 64;
  const int nk = dim / 16;
  const uint32_t stage_bytes = nblk * 8192;
  const uint32_t sQ = base;  // warpgroup w's 64 rows at sQ + w * nblk * 8192
  const uint32_t sK = sQ + 2 * nblk * 8192;
  const uint32_t bar0 = sK + S * stage_bytes;  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_ring(bar0, S);
  const int32_t* in = info + blockIdx.y * kPartInfoInts;  // grid: split_grid
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * 128;

  if (warp >= 8) {  // ---- producer warpgroup: one thread issues the TMA loads (as v6) ----
    detail::setmaxnreg_dec<kProducerRegs, kWgmmaThreads>();
    if (warp == 8 && lane == 0) produce_tiles<kTileTokens, S>(p, &kv_map, in, sK, stage_bytes, nblk, bar0);
    return;
  }
  detail::setmaxnreg_inc<kConsumerRegs, kWgmmaThreads>();
  const int wg = warp / 4, wiw = warp % 4, tid = threadIdx.x % 128;
  const int g = lane / 4, tq = lane % 4;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  const uint32_t myQ = sQ + wg * nblk * 8192;
  const int wrow0 = row0 + wg * 64;  // this warpgroup's first row
  int my_row[2], lim_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    my_row[h] = wrow0 + wiw * 16 + g + 8 * h;
    const int tok = min(my_row[h] / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  // Turn order on the tensor cores: warpgroup w issues its wgmmas after bar.sync on barrier
  // kTurn + w, which the other warpgroup arrives at once it has issued its own; warpgroup 1
  // starts by passing the first turn to 0. Both walk the same tiles, so both take the same
  // number of turns; warpgroup 0 takes 1's last pass after the loop.
  auto turn_wait = [&] { named_bar_sync(kTurn + wg, 256); };
  auto turn_pass = [&] { named_bar_arrive(kTurn + 1 - wg, 256); };
  if (wg == 1) named_bar_arrive(kTurn, 256);
  int split = in[4];
  int it = 0;
  for (int b = begin_b, t = begin_t; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kTileTokens);
    const int n_split = offsets[b + 1] - offsets[b];
    load_q_rows(p, b, wrow0, myQ, tid, 128);  // this warpgroup's Q rows (its previous S is complete)
    named_bar_sync(1 + wg, 128);
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kOReg];
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) acc[i] = 0.f;
    // Waits for tile ti_'s stage and zeroes its rows past L (pages past L may hold NaN, which
    // must not reach P.V; a bad page id's tile arrives zero-filled). Each warpgroup zeroes the
    // rows itself (both write the same zeros), so the warpgroups never wait for each other.
    auto wait_tile = [&](int it_, int ti_) -> uint32_t {
      const uint32_t tile_ = sK + (it_ % S) * stage_bytes;
      mbar_wait(bar0 + 8 * (it_ % S), (it_ / S) & 1);
      const int valid = tile_rows_in_length<kTileTokens>(L, ti_);
      if (valid < kTileTokens) {
        zero_tail_rows<kTileTokens>(tile_, valid, nblk, tid, 128);
        named_bar_sync(3 + wg, 128);
      }
      return tile_;
    };
    auto release = [&](int it_) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + it_ % S));
    };
    float sv[32];       // S, then P (fp32) of the current tile
    uint32_t pa[4][4];  // P as wgmma A fragments, one per 16-token k-step
    float alpha[2];
    // S of tile ti_ is done: its softmax, P packed into pa.
    auto finish_s = [&](int ti_) {
#pragma unroll
      for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
      softmax_tile(sv, ti_ * kTileTokens, L, lim_off, tq, scale_log2, m_run, l_run, alpha);
      pack_p_fragments(sv, pa);
    };
    // The first tile's S on its own turn (a segment always has a tile unless L = 0).
    if (t < stop) {
      const uint32_t tile0 = wait_tile(it, t);
      turn_wait();
      issue_s64_dc<DC>(sv, myQ, tile0, nk);
      turn_pass();
      gmma::wait<0>();
      finish_s(t);
    }
    for (int ti = t; ti < stop; ++ti, ++it) {
      const uint32_t tile = sK + (it % S) * stage_bytes;
      const bool more = ti + 1 < stop;
      if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) acc[i] *= alpha[(i >> 1) & 1];
      }
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
      const uint32_t next = more ? wait_tile(it + 1, ti + 1) : 0u;
      // ---- this warpgroup's turn: O += P V of tile ti, then S of tile ti + 1, one wait ----
      turn_wait();
      const uint64_t dv0 = gmma_desc(tile, 8192, 1024);
      gmma::fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t dv = gmma_desc_at(dv0, ks * 2048);
        if constexpr (DC == 256) gmma::wgmma_rs_n256(acc, pa[ks], dv);
        else gmma::wgmma_rs_n128(acc, pa[ks], dv);
      }
      gmma::commit();
      if (more) issue_s64_dc<DC>(sv, myQ, next, nk);
      turn_pass();
      gmma::wait<0>();
      release(it);
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
      if (more) finish_s(ti + 1);
    }
    // ---- epilogue: this warpgroup's rows, all d_c columns ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
      const int r = my_row[h];
      if (r >= rows) continue;
      const float l = l_run[h];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, 2 * tq, DC / 8,
                [&](int n) { return make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]); }, inv, lse, tq == 0);
    }
  }
  if (wg == 0) named_bar_sync(kTurn, 256);
}

template <int DC>
void launch_for_dc(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  static cuda::SmemLimitSet attr_set;
  auto kernel = decode_split_v7_kernel<DC>;
  cuda::set_smem_limit_once(kernel, kMaxSmemPerBlock, attr_set,
                            "mla decode split kernel (many-head path v7) smem limit");
  launch(kernel, split_grid(p.num_parts, row_blocks), dim3(kWgmmaThreads), V7Cfg<DC>::smem_bytes(DC + p.d_r), stream, false,
         "split kernel (v7) launch", make_kv_map(p, kTileTokens), p, static_cast<const int32_t*>(w.info),
         static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc);
}

}  // namespace

void launch_manyhead_v7(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  switch (p.d_c) {
    case 128: launch_for_dc<128>(p, w, row_blocks, stream); break;
    case 256: launch_for_dc<256>(p, w, row_blocks, stream); break;
    default: throw InputError("mla decode params: d_c = " + std::to_string(p.d_c) + " on the v7 path");
  }
}

}  // namespace mla::kernels::detail
