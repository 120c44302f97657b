// Naive prefix attention on wgmma (sm_90a) for the DeepSeek-V3 / Kimi-K2 head shape
// ((d_n + d_r, d_v) = (192, 128)): the same tiles, splits and rounding points as the mma.sync
// kernel (prefix_attention.cu) and its twin (quant/prefix_twin_bf16.hpp), on the warpgroup MMA.
//
// One CTA per (128 query rows, prefix split, head), 3 warpgroups:
//   producer (warpgroup 2, one thread): TMA boxes of 64 columns x 64 prefix tokens (128-byte
//     swizzle, the wgmma K-major layout) from K [L_s, H, 192] and V [L_s, H, 128] viewed as 3-D
//     tensors (columns, heads, tokens) into a 4-stage full/empty mbarrier ring (K: 3 boxes,
//     V: 2 boxes per stage); tokens past L_s arrive as zeros.
//   consumers (warpgroups 0 and 1, 64 query rows each):
//     S = Q K^T: wgmma m64n64k16 with Q in registers (loaded once from global in the A-fragment
//       layout) and K from shared memory, so a k-step reads 2 KB of shared memory instead of 4
//       (Q and K both from shared memory would sit at the shared-memory bandwidth limit);
//     online softmax of the 64-token tile in registers (base 2, the twin's rounding points);
//     O += P V: wgmma m64n128k16, P (bf16) in registers, V from shared memory (MN-major).
//     S of tile t + 1 is issued before P.V of tile t and its softmax runs while that P.V is on
//     the tensor cores (FlashAttention-3's intra-warpgroup overlap); the two warpgroups issue
//     their MMAs in turns (ping-pong), so one's softmax runs under the other's MMAs. A stage is
//     released once the P.V that reads it is complete.
// docs/gpu-notes.md (issue 13) has the predictions and measurements of each step.
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "kernels/decode_device.cuh"
#include "kernels/prefix_attention.hpp"
#include "kernels/prefix_device.cuh"
#include "kernels/setmaxnreg.cuh"
#include "kernels/tensor_map.hpp"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::prefix {
namespace {

using detail::fence_proxy_async;
using detail::gmma_desc;
using detail::kLn2;
using detail::kLog2e;
using detail::mbar_arrive;
using detail::mbar_arrive_expect_tx;
using detail::mbar_init;
using detail::mbar_wait;
using detail::pack_p_fragments;
using detail::smem_u32;

constexpr int kDqk = 192, kDv = 128;
constexpr int kTile = quant::kPrefixTile;  // 64 prefix tokens per tile
constexpr int kThreads = 384;              // 2 consumer warpgroups + 1 producer warpgroup
constexpr int kStages = 4;
constexpr uint32_t kBlk = 8192;               // one 64-token x 64-column box (128 B rows)
constexpr int kKBlk = kDqk / 64, kVBlk = kDv / 64;
constexpr uint32_t kStageBytes = (kKBlk + kVBlk) * kBlk;  // 40 KB
// 1 KB alignment slack (the 128-byte swizzle pattern needs 1024-byte aligned boxes), the ring,
// 2 S mbarriers.
constexpr size_t kSmemBytes = 1024 + kStages * size_t(kStageBytes) + 2 * kStages * 8;
static_assert(kSmemBytes <= 232448, "shared memory per block");
static_assert(quant::kPrefixRowsPerBlock == 128, "two consumer warpgroups of 64 rows");

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// Registers a thread (setmaxnreg): the producer warpgroup, each of the two consumer warpgroups.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kProducerRegs + 2 * kConsumerRegs <= detail::setmaxnreg_budget(kThreads),
              "setmaxnreg asks for more registers than the launch allocates");

// The maps are __grid_constant__ parameters and no launch here uses programmatic dependent launch
// (docs/gpu-notes.md, v4: a parameter map failed only together with PDL).
__global__ void __launch_bounds__(kThreads, 1)
    prefix_attn_wgmma_kernel(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                             const PrefixAttnParams p, int per_split) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sKV = (raw + 1023u) & ~1023u;
  const uint32_t bar0 = sKV + kStages * kStageBytes;  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.y, h = blockIdx.z, H = p.heads;
  const int j_begin = split * per_split;
  const int j_end = min(p.prefix_len, j_begin + per_split);
  const int n_tiles = j_end > j_begin ? (j_end - j_begin + kTile - 1) / kTile : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar0 + 8 * s, 1);                // the producer's arrive + the TMA bytes
      mbar_init(bar0 + 8 * (kStages + s), 8);    // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp >= 8) {  // ---- producer warpgroup: one thread issues the TMA boxes ----
    detail::setmaxnreg_dec<kProducerRegs, kThreads>();
    if (warp == 8 && lane == 0) {
      for (int t = 0; t < n_tiles; ++t) {
        const int stage = t % kStages;
        mbar_wait(bar0 + 8 * (kStages + stage), ((t / kStages) & 1) ^ 1);
        const uint32_t full = bar0 + 8 * stage, dst = sKV + stage * kStageBytes;
        mbar_arrive_expect_tx(full, kStageBytes);
        const int j0 = j_begin + t * kTile;
        for (int kb = 0; kb < kKBlk; ++kb) tma_load_3d(dst + kb * kBlk, &k_map, kb * 64, h, j0, full);
        for (int vb = 0; vb < kVBlk; ++vb) tma_load_3d(dst + (kKBlk + vb) * kBlk, &v_map, vb * 64, h, j0, full);
      }
    }
    return;
  }

  // ---- consumers: warpgroup wg owns query rows 64 wg .. 64 wg + 63 of the block ----
  detail::setmaxnreg_inc<kConsumerRegs, kThreads>();
  const int wg = warp / 4, wiw = warp % 4, g = lane / 4, tq = lane % 4;
  const int row_lo = blockIdx.x * quant::kPrefixRowsPerBlock + wg * 64 + wiw * 16 + g, row_hi = row_lo + 8;
  const float neg_inf = -__int_as_float(0x7f800000);

  // Q as wgmma A fragments (per warp the mma.sync m16n8k16 A layout): qf[ks] covers columns
  // 16 ks .. 16 ks + 15 of rows row_lo / row_hi; rows past p.rows are zeros (never stored).
  uint32_t qf[kDqk / 16][4];
  {
    const bool lo_ok = row_lo < p.rows, hi_ok = row_hi < p.rows;
    const uint32_t* q_lo = reinterpret_cast<const uint32_t*>(p.q + (static_cast<size_t>(lo_ok ? row_lo : 0) * H + h) * kDqk);
    const uint32_t* q_hi = reinterpret_cast<const uint32_t*>(p.q + (static_cast<size_t>(hi_ok ? row_hi : 0) * H + h) * kDqk);
#pragma unroll
    for (int ks = 0; ks < kDqk / 16; ++ks) {
      const int c = ks * 8 + tq;  // in bf16 pairs
      qf[ks][0] = lo_ok ? q_lo[c] : 0u;
      qf[ks][1] = hi_ok ? q_hi[c] : 0u;
      qf[ks][2] = lo_ok ? q_lo[c + 4] : 0u;
      qf[ks][3] = hi_ok ? q_hi[c + 4] : 0u;
    }
  }

  float acc[kDv / 2];  // O: wgmma m64n128 accumulators (row g / g + 8, columns 8 n + 2 tq + {0, 1})
#pragma unroll
  for (int i = 0; i < kDv / 2; ++i) acc[i] = 0.f;
  float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
  const float scale_log2 = p.scale * kLog2e;
  float sv[32];       // S, then P (fp32) of the current tile
  uint32_t pa[4][4];  // P as A fragments, one per 16-token k-step

  // A warpgroup whose 64 rows all lie past p.rows (the second one of a last, partial row block,
  // e.g. at B s_q = 64) computes nothing and only keeps the ring's protocol: it waits for each
  // stage to be full before releasing it, so its arrivals never count towards a later use.
  const bool active = blockIdx.x * quant::kPrefixRowsPerBlock + wg * 64 < p.rows;
  auto stage_of = [&](int t) { return sKV + (t % kStages) * kStageBytes; };
  auto wait_full = [&](int t) { mbar_wait(bar0 + 8 * (t % kStages), (t / kStages) & 1); };
  auto release = [&](int t) {  // this warp is done with tile t's stage
    __syncwarp();
    if (lane == 0) mbar_arrive(bar0 + 8 * (kStages + t % kStages));
  };
  // S = Q K^T of tile t, one commit group (12 k-steps of 16 columns: byte column kb of the
  // 128-byte-swizzled K boxes); sv is in flight until a wgmma.wait covers the group.
  auto issue_s = [&](int t) {
#pragma unroll
    for (int ks = 0; ks < kDqk / 16; ++ks)
#pragma unroll
      for (int r = 0; r < 4; ++r) gmma::fence_operand(qf[ks][r]);
    gmma::fence();
    const uint32_t kt = stage_of(t);
#pragma unroll
    for (int ks = 0; ks < kDqk / 16; ++ks) {
      const uint32_t kb = ks * 32;
      wgmma_rs_n64_kmajor(sv, qf[ks], gmma_desc(kt + (kb >> 7) * kBlk + (kb & 127), 16, 1024), ks > 0 ? 1 : 0);
    }
    gmma::commit();
  };
  // O += P V of tile t, one commit group (4 k-steps of 16 tokens; V's two 64-column boxes are
  // 8 KB apart: LBO); acc and pa are in flight until a wgmma.wait covers the group.
  auto issue_pv = [&](int t) {
#pragma unroll
    for (int i = 0; i < kDv / 2; ++i) gmma::fence_operand(acc[i]);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
    gmma::fence();
    const uint32_t vt = stage_of(t) + kKBlk * kBlk;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) gmma::wgmma_rs_n128(acc, pa[ks], gmma_desc(vt + ks * 2048, kBlk, 1024));
    gmma::commit();
  };
  auto fence_acc = [&] {
#pragma unroll
    for (int i = 0; i < kDv / 2; ++i) gmma::fence_operand(acc[i]);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
  };
  // Online softmax of tile t's completed S (base 2): sv becomes P (fp32), alpha the factor for
  // O. Tokens at or past the run's end are masked (only a run's last tile has such tokens).
  // Every tile holds at least one key of the run, so the new row max is finite.
  auto softmax = [&](int t, float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
    const int j0 = j_begin + t * kTile;
    const bool full_tile = j0 + kTile <= j_end;
    float tmax[2] = {neg_inf, neg_inf};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      float x = sv[i] * scale_log2;
      if (!full_tile && j0 + (i >> 2) * 8 + 2 * tq + (i & 1) >= j_end) x = neg_inf;
      sv[i] = x;
      tmax[(i >> 1) & 1] = fmaxf(tmax[(i >> 1) & 1], x);
    }
    float m_new[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      tmax[hh] = fmaxf(tmax[hh], __shfl_xor_sync(0xffffffffu, tmax[hh], 1));
      tmax[hh] = fmaxf(tmax[hh], __shfl_xor_sync(0xffffffffu, tmax[hh], 2));
      m_new[hh] = fmaxf(m_run[hh], tmax[hh]);
      alpha[hh] = exp2f(m_run[hh] - m_new[hh]);
      m_run[hh] = m_new[hh];
    }
    float lsum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int hh = (i >> 1) & 1;
      const float pv = exp2f(sv[i] - m_new[hh]);
      lsum[hh] += pv;
      sv[i] = pv;
    }
    l_run[0] = l_run[0] * alpha[0] + lsum[0];
    l_run[1] = l_run[1] * alpha[1] + lsum[1];
  };
  // P (bf16) as A fragments and O rescaled: only once this warpgroup's previous P.V is complete.
  auto pack_and_rescale = [&](const float (&alpha)[2]) {
    pack_p_fragments(sv, pa);
    // Once the running max of both rows stops moving (most tiles after the first few), alpha is
    // exactly 1 and the 64 multiplies would change nothing: skipped.
    if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
      for (int i = 0; i < kDv / 2; ++i) acc[i] *= alpha[(i >> 1) & 1];
    }
  };

  if (!active) {
    for (int t = 0; t < n_tiles; ++t) {
      wait_full(t);
      release(t);
    }
  } else if (n_tiles > 0) {
    // S of tile t + 1 is issued before P.V of tile t, and the softmax of tile t + 1 runs while
    // that P.V is on the tensor cores; the arithmetic (and its order per element) is that of a
    // serial loop: O = O alpha_t + P_t V_t with alpha_t applied after P.V of tile t - 1.
    // Ping-pong (when both warpgroups have rows): the warpgroups take turns to issue their
    // MMAs (named barriers 1 and 2: warpgroup w waits on 1 + w, then lets the other go), so one
    // warpgroup's softmax runs while the other's MMAs occupy the tensor cores. Each warpgroup
    // has n_tiles + 1 issue points; warpgroup 1 opens the first turn for warpgroup 0 and skips
    // its last hand-over, so every barrier use completes with exactly 256 threads.
    const bool pingpong = blockIdx.x * quant::kPrefixRowsPerBlock + 64 < p.rows;
    auto my_turn = [&] {
      if (pingpong) bar_sync(1 + wg, 256);
    };
    auto hand_over = [&](bool last) {
      if (pingpong && !(last && wg == 1)) bar_arrive(2 - wg, 256);
    };
    if (pingpong && wg == 1) bar_arrive(1, 256);
    float alpha[2];
    wait_full(0);
    my_turn();
    issue_s(0);
    hand_over(false);
    gmma::wait<0>();
    softmax(0, alpha);
    pack_and_rescale(alpha);
    for (int t = 1; t < n_tiles; ++t) {
      wait_full(t);
      my_turn();
      issue_s(t);
      issue_pv(t - 1);
      hand_over(false);
      gmma::wait<1>();  // S of tile t (committed first) is complete; P.V of t - 1 may run on
      softmax(t, alpha);
      gmma::wait<0>();
      fence_acc();
      release(t - 1);
      pack_and_rescale(alpha);
    }
    my_turn();
    issue_pv(n_tiles - 1);
    hand_over(true);
    gmma::wait<0>();
    fence_acc();
    release(n_tiles - 1);
  }

  // Epilogue: complete the row sums over the quad, normalise, write the run's partials.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    l_run[hh] += __shfl_xor_sync(0xffffffffu, l_run[hh], 1);
    l_run[hh] += __shfl_xor_sync(0xffffffffu, l_run[hh], 2);
    const int row = hh ? row_hi : row_lo;
    if (row >= p.rows) continue;
    const float l = l_run[hh];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const size_t idx = (static_cast<size_t>(split) * p.rows + row) * H + h;
    float2* dst = reinterpret_cast<float2*>(p.part_o + idx * kDv);
#pragma unroll
    for (int n = 0; n < kDv / 8; ++n)
      dst[n * 4 + tq] = make_float2(acc[n * 4 + 2 * hh] * inv, acc[n * 4 + 2 * hh + 1] * inv);
    if (tq == 0) p.part_lse[idx] = l > 0.f ? (m_run[hh] + log2f(l)) * kLn2 : neg_inf;
  }
}

// x [tokens, heads, cols] bf16 as a 3-D tensor (cols, heads, tokens); box 64 columns x 1 head x
// 64 tokens with the 128-byte swizzle; tokens past `tokens` read as zeros.
CUtensorMap make_map(const uint16_t* x, int cols, int heads, int tokens, const char* what) {
  CUtensorMap m;
  const cuuint64_t gdim[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(tokens)};
  const cuuint64_t gstride[2] = {static_cast<cuuint64_t>(cols) * 2, static_cast<cuuint64_t>(cols) * heads * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(kTile)};
  const cuuint32_t estr[3] = {1, 1, 1};
  const CUresult r = cuda::encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<uint16_t*>(x), gdim,
                                          gstride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(std::string("prefix attention: cuTensorMapEncodeTiled failed for ") + what + " (" + std::to_string(r) +
                "; the tensor must be 16-byte aligned)");
  return m;
}

}  // namespace

void launch_prefix_attn_wgmma(const PrefixAttnParams& p, int per_split, cudaStream_t stream) {
  if (p.d_n + p.d_r != kDqk || p.d_v != kDv)
    throw InputError("prefix attention (wgmma): (d_n + d_r, d_v) = (" + std::to_string(p.d_n + p.d_r) + ", " +
                     std::to_string(p.d_v) + ") (supported: (192, 128))");
  static cuda::SmemLimitSet smem_set;
  cuda::set_smem_limit_once(prefix_attn_wgmma_kernel, kSmemBytes, smem_set, "prefix attention (wgmma): smem limit");
  const CUtensorMap km = make_map(p.k, kDqk, p.heads, p.prefix_len, "K");
  const CUtensorMap vm = make_map(p.v, kDv, p.heads, p.prefix_len, "V");
  const dim3 grid((p.rows + quant::kPrefixRowsPerBlock - 1) / quant::kPrefixRowsPerBlock, p.splits, p.heads);
  prefix_attn_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(km, vm, p, per_split);
  cuda::check(cudaGetLastError(), "prefix attention (wgmma): launch");
}

}  // namespace mla::kernels::prefix
