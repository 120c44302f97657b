// The seesaw path (variant 8, decode_uses_seesaw: > 16 query rows, d_c = 512, d_r = 64): wgmma,
// 64-row blocks, 64-token tiles taken in pairs (T0 in buffer 0, T1 in buffer 1), the schedule
// FlashMLA's sm90 dense decode describes in its 2025-04 deep-dive ("seesaw"), written here for
// our scheduler, cache view and twin:
//   warpgroup 0 owns O's columns 0..255 (O_L), warpgroup 1 columns 256..511 (O_R);
//   S0 = Q K0^T on warpgroup 0, S1 = Q K1^T on warpgroup 1 (each the whole 576-wide product);
//   wg0: m0, scale0, P0;  O_L = O_L scale0 + P0 V0_L
//   wg1: m1, scale1, P1;  O_R = O_R (scale0 scale1) + P1 V1_R
//   wg0: P0' = P0 scale1 (to shared memory);  wg1: O_R += P0' V0_R
//   wg0: O_L = O_L scale1 + P1 V1_L (P1 from shared memory)
// so one warpgroup's softmax runs under the other's tensor-core work. Each 64-column block of a
// buffer is reloaded by the warpgroup that used it last, as soon as that use completes (no
// producer warp, no empty barriers: one full mbarrier per block, armed by the loading thread),
// and the next S consumes the blocks in the order they were freed. Q's rope block lives in
// registers (an RS wgmma), which frees its shared memory for P1.
// Rounding points: as the twin's pair mode (quant/decode_twin_bf16.cpp): O_R's first tile of a
// pair uses bf16(P0 * scale1); a lone last tile is an ordinary tile.
#include <cstdlib>

#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/decode_store.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::detail {
namespace {

using quant::kPartInfoInts;
constexpr int kTile = 64;        // tokens per tile (the twin's tile on this path)
constexpr int kThreads = 256;    // two warpgroups, no producer
constexpr int kBlocks = 9;       // 64-column blocks of a 576-wide row
constexpr uint32_t kBlockBytes = 8192;  // 64 tokens (or rows) x 128 bytes, 128-byte swizzle
constexpr uint32_t kBufBytes = kBlocks * kBlockBytes;

// Shared memory (after 1 KB alignment): Q blocks 0..7 (block 8 is in registers), P1 in Q's ninth
// block, the two tile buffers, P0, the row floats and 18 mbarriers.
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffP1 = 8 * kBlockBytes;
constexpr uint32_t kOffK0 = kOffP1 + kBlockBytes;
constexpr uint32_t kOffK1 = kOffK0 + kBufBytes;
constexpr uint32_t kOffP0 = kOffK1 + kBufBytes;
constexpr uint32_t kOffFloats = kOffP0 + kBlockBytes;  // sM[64], sScale0[64], sScale1[64], sL[2][64]
constexpr uint32_t kOffBars = kOffFloats + 5 * 64 * 4;  // buffer 0's 9, then buffer 1's 9
constexpr size_t kSmemBytes = 1024 + kOffBars + 2 * kBlocks * 8;

// Named barriers (0 is __syncthreads).
enum : int {
  kBarSegment = 1,  // all 256: a request segment's start (Q, row floats, buffers free)
  kBarScale0 = 2,   // wg0 arrives (m0, scale0 written), wg1 waits
  kBarScale1 = 3,   // wg1 arrives (m1, scale1 written), wg0 waits
  kBarP0 = 4,       // wg0 arrives (P0' in shared memory), wg1 waits
  kBarP1 = 5,       // wg1 arrives (P1 in shared memory, O_R += P0' V0_R issued), wg0 waits
  kBarZero = 6,     // + warpgroup: its tail-row zeroing is done (128 threads)
  kBarEpilogue = 8  // all 256: both halves' row sums in shared memory
};

// wgmma shared-memory descriptors (128-byte swizzle, stride 1024 between 8-row groups) as a
// runtime low word plus constants: lo_k = (base >> 4) | (1 << 16) is the K-major descriptor's
// low word at the 1 KB-aligned base; a region, block or k-step at byte offset `off` adds off >> 4
// (no carry: shared memory is < 256 KB), and the MN-major form (P.V's V, leading offset one
// 8 KB block) replaces the leading-offset field 1 by 512. Everything but lo_k folds at compile
// time, so the descriptors cost an add each instead of a mask-shift-or chain and a register pair.
constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
constexpr uint32_t kDescMn = (512u - 1u) << 16;
__device__ __forceinline__ uint64_t kdesc(uint32_t lo_k, uint32_t off) {
  return (static_cast<uint64_t>(kDescHi) << 32) | (lo_k + (off >> 4));
}
__device__ __forceinline__ uint64_t mndesc(uint32_t lo_k, uint32_t off) {
  return (static_cast<uint64_t>(kDescHi) << 32) | (lo_k + (off >> 4) + kDescMn);
}

// One thread: loads blocks [KB0, KB1) of tile ti of request b into buffer buf, each block
// completing on its own mbarrier (armed here). A bad page id loads from before the tensor's
// start (zero-filled by the copy engine) and is flagged, as the other wgmma paths do.
template <int KB0, int KB1, bool EF = false>
__device__ __forceinline__ void load_blocks(const quant::Bf16DecodeParams& p, const CUtensorMap* map, int row,
                                            uint32_t buf, uint32_t bars) {
  uint64_t policy = 0;
  if constexpr (EF) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#pragma unroll
  for (int kb = KB0; kb < KB1; ++kb) {
    mbar_arrive_expect_tx(bars + 8 * kb, kBlockBytes);
    if constexpr (EF)
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
          " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(buf + kb * kBlockBytes),
          "l"(reinterpret_cast<uint64_t>(map)), "r"(kb * 64), "r"(row), "r"(bars + 8 * kb), "l"(policy)
          : "memory");
    else
      tma_load_2d(buf + kb * kBlockBytes, map, kb * 64, row, bars + 8 * kb);
  }
}
// The cache row of tile ti's first token (-kTile for a bad page id: zero-filled, flagged).
__device__ __forceinline__ int tile_row(const quant::Bf16DecodeParams& p, int b, int ti) {
  const int j0 = ti * kTile;
  const int slot = j0 / p.page_size;
  const int page = slot < p.max_pages ? p.page_table[static_cast<size_t>(b) * p.max_pages + slot] : -1;
  const bool ok = page >= 0 && page < p.num_pages;
  if (!ok && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
  return ok ? page * p.page_size + j0 % p.page_size : -kTile;
}
// S (+)= Q K^T over blocks [KB0, KB1) of the tile buffer at byte offset koff, each block after
// its mbarrier; Q's blocks 0..7 from shared memory, block 8 from the rope fragment q8
// (registers). ZERO: the first k-step overwrites the accumulators.
template <int KB0, int KB1, bool ZERO>
__device__ __forceinline__ void issue_s_blocks(float (&sv)[32], uint32_t lo_k, uint32_t koff, uint32_t bars,
                                               uint32_t phase, const uint32_t (&q8)[4][4]) {
#pragma unroll
  for (int kb = KB0; kb < KB1; ++kb) {
    mbar_wait(bars + 8 * kb, phase);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t off = kb * kBlockBytes + kk * 32;
      const int acc = (ZERO && kb == KB0 && kk == 0) ? 0 : 1;
      if (kb < 8)
        gmma::wgmma_ss_n64(sv, kdesc(lo_k, kOffQ + off), kdesc(lo_k, koff + off), acc);
      else
        gmma::wgmma_rs_n64_kmajor(sv, q8[kk], kdesc(lo_k, koff + off), acc);
    }
  }
}
// P (fp32 accumulators of a 64 x 64 S tile) as bf16 A fragments, one per 16-token k-step.
__device__ __forceinline__ void pack_p(const float (&sv)[32], uint32_t (&pa)[4][4], const float (&f)[2]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const int n0 = 2 * ks, n1 = 2 * ks + 1;
    pa[ks][0] = pack_bf16(sv[n0 * 4 + 0] * f[0], sv[n0 * 4 + 1] * f[0]);
    pa[ks][1] = pack_bf16(sv[n0 * 4 + 2] * f[1], sv[n0 * 4 + 3] * f[1]);
    pa[ks][2] = pack_bf16(sv[n1 * 4 + 0] * f[0], sv[n1 * 4 + 1] * f[0]);
    pa[ks][3] = pack_bf16(sv[n1 * 4 + 2] * f[1], sv[n1 * 4 + 3] * f[1]);
  }
}
// Stores P fragments into a 64 x 64 bf16 tile (128-byte swizzled K-major: wgmma's A layout).
__device__ __forceinline__ void store_p(uint32_t sp, const uint32_t (&pa)[4][4], const int (&lrow)[2], int tq) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = lrow[h];
      const int n0 = 2 * ks, n1 = 2 * ks + 1;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sp + r * 128 + ((n0 ^ (r & 7)) << 4) + 4 * tq), "r"(pa[ks][h])
                   : "memory");
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sp + r * 128 + ((n1 ^ (r & 7)) << 4) + 4 * tq),
                   "r"(pa[ks][2 + h])
                   : "memory");
    }
}
// The online softmax of one S tile (rows g, g + 8 of this thread's warp): mask, base-2 scale,
// tile max (quad), the running max from sM (new value written back), P = exp2(x - m) in place,
// the row sums of P; returns the factor for what was accumulated before (the twin's formulas).
__device__ __forceinline__ void softmax_rows(float (&sv)[32], int j0, const int (&lim)[2], int tq, float scale_log2,
                                             float* sM, const int (&lrow)[2], float (&scale)[2], float (&lsum)[2]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float tmax[2] = {neg_inf, neg_inf};
  if (j0 + kTile <= min(lim[0], lim[1])) {  // no key of the tile is masked for either row
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      sv[i] *= scale_log2;
      tmax[(i >> 1) & 1] = fmaxf(tmax[(i >> 1) & 1], sv[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int h = (i >> 1) & 1;
      const int j = j0 + (i >> 2) * 8 + 2 * tq + (i & 1);
      const float x = (j < lim[h]) ? sv[i] * scale_log2 : neg_inf;
      sv[i] = x;
      tmax[h] = fmaxf(tmax[h], x);
    }
  }
  float m_use[2], m_new[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
    const float m_old = sM[lrow[h]];
    m_new[h] = fmaxf(m_old, tmax[h]);
    m_use[h] = (m_new[h] == neg_inf) ? 0.f : m_new[h];
    scale[h] = exp2f(m_old - m_use[h]);
  }
  __syncwarp();  // the quad's reads of sM before its update
  if (tq == 0) {
    sM[lrow[0]] = m_new[0];
    sM[lrow[1]] = m_new[1];
  }
  lsum[0] = lsum[1] = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int h = (i >> 1) & 1;
    sv[i] = exp2f(sv[i] - m_use[h]);
    lsum[h] += sv[i];
  }
}
template <int N>
__device__ __forceinline__ void scale_rows(float (&acc)[N], const float (&f)[2]) {
  if (f[0] != 1.f || f[1] != 1.f) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] *= f[(i >> 1) & 1];
  }
}
template <int N>
__device__ __forceinline__ void fence_acc(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) gmma::fence_operand(acc[i]);
}
__device__ __forceinline__ void fence_frag(uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
}
// O (this warpgroup's 256 columns) += P V over one tile: V = blocks 4 vh .. 4 vh + 3 of the
// buffer at byte offset koff (MN-major; a k-step of 16 tokens is 2 KB), P from registers (RS) or
// from the 64 x 64 tile at byte offset poff (SS).
__device__ __forceinline__ void issue_pv_regs(float (&acc)[128], const uint32_t (&pa)[4][4], uint32_t lo_k,
                                              uint32_t koff, int vh) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) gmma::wgmma_rs_n256(acc, pa[ks], mndesc(lo_k, koff + vh * 4 * kBlockBytes + ks * 2048));
}
__device__ __forceinline__ void issue_pv_smem(float (&acc)[128], uint32_t lo_k, uint32_t poff, uint32_t koff, int vh) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    gmma::wgmma_ss_n256_tb(acc, kdesc(lo_k, poff + ks * 32), mndesc(lo_k, koff + vh * 4 * kBlockBytes + ks * 2048));
}
// Zeroes rows >= valid of blocks [kb0, kb0 + 4) of a buffer (pages past L may hold NaN, which
// must not reach P.V), by this warpgroup; visible to wgmma once the warpgroup barrier passes.
__device__ __forceinline__ void zero_tail(uint32_t buf, int kb0, int valid, int tid, int wg) {
  for (int c = tid; c < 4 * kTile * 8; c += 128) {
    const int r = (c >> 3) % kTile;
    if (r >= valid) st_shared_v4(buf + kb0 * kBlockBytes + c * 16, make_uint4(0u, 0u, 0u, 0u));
  }
  fence_proxy_async();
  named_bar_sync(kBarZero + wg, 128);
}

// RF: the grid's x is the row block (the row blocks of a part adjacent in launch order, as
// FlashMLA's grid); EF: the tile loads carry an L2 evict-first hint (as FlashMLA's).
template <bool RF, bool EF>
__global__ void __launch_bounds__(kThreads, 1)
    decode_split_seesaw_kernel(const CUtensorMap* kv_map, const quant::Bf16DecodeParams p,
                               const int32_t* __restrict__ info, const int32_t* __restrict__ offsets,
                               float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ = base + kOffQ, sP1 = base + kOffP1, sK0 = base + kOffK0, sK1 = base + kOffK1,
                 sP0 = base + kOffP0;
  float* sM = reinterpret_cast<float*>(gbase + kOffFloats);
  float* sScale0 = sM + 64;
  float* sScale1 = sM + 128;
  float* sL = sM + 192;  // [2][64]
  const uint32_t bars0 = base + kOffBars, bars1 = bars0 + 8 * kBlocks;
  const uint32_t lo_k = ((base & 0x3FFFFu) >> 4) | (1u << 16);  // see kdesc

  if (threadIdx.x == 0) {
    for (int i = 0; i < 2 * kBlocks; ++i) mbar_init(bars0 + 8 * i, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  griddep_wait();
  // The role index as a warp-uniform value ptxas can see (else it serialises the RS wgmmas).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = threadIdx.x % 128, warp_in_wg = tid / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const bool loader = tid == 0;  // this warpgroup's TMA thread
  if (loader) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(kv_map) : "memory");

  const int32_t* in = info + (RF ? blockIdx.y : blockIdx.x) * kPartInfoInts;
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = (RF ? blockIdx.x : blockIdx.y) * 64;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  int lrow[2], lim_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lrow[h] = warp_in_wg * 16 + g + 8 * h;
    const int tok = min((row0 + lrow[h]) / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  uint32_t phase0 = 0, phase1 = 0;  // buffer 0's barriers (waited by wg0), buffer 1's (wg1)
  int split = in[4];
  for (int b = begin_b, t = begin_t; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kTile);
    const int n_split = offsets[b + 1] - offsets[b];
    const int lim[2] = {L - lim_off[0], L - lim_off[1]};
    named_bar_sync(kBarSegment, kThreads);  // the previous segment is done with every buffer
    if (t >= stop) continue;  // an empty request (L = 0) writes nothing here, as the twin
    if (threadIdx.x == 0) {
      load_blocks<0, kBlocks, EF>(p, kv_map, tile_row(p, b, t), sK0, bars0);
      if (t + 1 < stop) load_blocks<0, kBlocks, EF>(p, kv_map, tile_row(p, b, t + 1), sK1, bars1);
    }
    // Q blocks 0..7 into shared memory (both warpgroups), the rope block as A fragments.
    {
      const bf16* qb = reinterpret_cast<const bf16*>(p.q) + static_cast<size_t>(b) * rows * 576;
      for (int c = threadIdx.x; c < 64 * 64; c += kThreads) {  // 64 rows x 64 chunks of 8 columns
        const int r = c / 64, k = c % 64;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(qb + static_cast<size_t>(row0 + r) * 576 + k * 8);
        st_shared_v4(sQ + (k >> 3) * kBlockBytes + r * 128 + (((k & 7) ^ (r & 7)) << 4), v);
      }
      if (threadIdx.x < 64) sM[threadIdx.x] = neg_inf;
      fence_proxy_async();
    }
    uint32_t q8[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int r4 = 0; r4 < 4; ++r4) {
        const int r = row0 + lrow[r4 & 1];
        const int col = 512 + kk * 16 + 2 * tq + ((r4 >> 1) << 3);
        q8[kk][r4] = 0u;
        if (r < rows)
          q8[kk][r4] = *reinterpret_cast<const uint32_t*>(
              reinterpret_cast<const bf16*>(p.q) + (static_cast<size_t>(b) * rows + r) * 576 + col);
      }
    named_bar_sync(kBarSegment, kThreads);

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    float l_run[2] = {0.f, 0.f};
    float sv[32];
    uint32_t pa[4][4];
    if (wg == 0) {
      // ---- warpgroup 0: O_L, the pairs' first tiles (buffer 0) ----
      gmma::fence();
      issue_s_blocks<0, kBlocks, true>(sv, lo_k, kOffK0, bars0, phase0, q8);
      gmma::commit();
      gmma::wait<0>();
      fence_acc(sv);
      phase0 ^= 1;
      for (int ti = t; ti < stop; ti += 2) {
        const bool has1 = ti + 1 < stop, next0 = ti + 2 < stop, next1 = ti + 3 < stop;
        const int row_n0 = (loader && next0) ? tile_row(p, b, ti + 2) : 0;
        const int row_n1 = (loader && next1) ? tile_row(p, b, ti + 3) : 0;
        float scale0[2], lsum[2];
        softmax_rows(sv, ti * kTile, lim, tq, scale_log2, sM, lrow, scale0, lsum);
        if (tq == 0) {
          sScale0[lrow[0]] = scale0[0];
          sScale0[lrow[1]] = scale0[1];
        }
        named_bar_arrive(kBarScale0, kThreads);
        l_run[0] = l_run[0] * scale0[0] + lsum[0];
        l_run[1] = l_run[1] * scale0[1] + lsum[1];
        scale_rows(acc, scale0);
        const float one[2] = {1.f, 1.f};
        pack_p(sv, pa, one);
        const int valid0 = min(kTile, L - ti * kTile);
        if (valid0 < kTile) zero_tail(sK0, 0, valid0, tid, 0);
        fence_acc(acc);
        fence_frag(pa);
        gmma::fence();
        issue_pv_regs(acc, pa, lo_k, kOffK0, 0);  // O_L += P0 V0_L
        gmma::commit();
        gmma::wait<0>();
        fence_acc(acc);
        fence_frag(pa);
        named_bar_sync(kBarScale1, kThreads);  // m1 and scale1 are in shared memory
        if (loader && next0) load_blocks<0, 4, EF>(p, kv_map, row_n0, sK0, bars0);  // V0_L's blocks are free
        const float scale1[2] = {sScale1[lrow[0]], sScale1[lrow[1]]};
        pack_p(sv, pa, scale1);  // P0' = P0 scale1
        store_p(sP0, pa, lrow, tq);
        fence_proxy_async();
        named_bar_arrive(kBarP0, kThreads);
        if (has1) {
          const int valid1 = min(kTile, L - (ti + 1) * kTile);
          if (valid1 < kTile) zero_tail(sK1, 0, valid1, tid, 0);
          named_bar_sync(kBarP1, kThreads);  // P1 is in shared memory
          scale_rows(acc, scale1);
          l_run[0] *= scale1[0];
          l_run[1] *= scale1[1];
          fence_acc(acc);
          gmma::fence();
          issue_pv_smem(acc, lo_k, kOffP1, kOffK1, 0);  // O_L = O_L scale1 + P1 V1_L
          gmma::commit();
        }
        if (next0) {  // S of the next pair's first tile: blocks 0..3 (freed first), then 4..8
          gmma::fence();
          issue_s_blocks<0, 4, true>(sv, lo_k, kOffK0, bars0, phase0, q8);
          gmma::commit();
          gmma::wait<1>();  // O_L += P1 V1_L is done: V1_L's blocks are free
          if (loader && next1) load_blocks<0, 4, EF>(p, kv_map, row_n1, sK1, bars1);
          issue_s_blocks<4, kBlocks, false>(sv, lo_k, kOffK0, bars0, phase0, q8);
          gmma::commit();
          phase0 ^= 1;
        }
        gmma::wait<0>();
        fence_acc(acc);
        fence_acc(sv);
      }
    } else {
      // ---- warpgroup 1: O_R, the pairs' second tiles (buffer 1) ----
      if (t + 1 < stop) {
        gmma::fence();
        issue_s_blocks<4, kBlocks, true>(sv, lo_k, kOffK1, bars1, phase1, q8);
        issue_s_blocks<0, 4, false>(sv, lo_k, kOffK1, bars1, phase1, q8);
        gmma::commit();
        gmma::wait<0>();
        fence_acc(sv);
        phase1 ^= 1;
      }
      for (int ti = t; ti < stop; ti += 2) {
        const bool has1 = ti + 1 < stop, next0 = ti + 2 < stop, next1 = ti + 3 < stop;
        const int row_n0 = (loader && next0) ? tile_row(p, b, ti + 2) : 0;
        const int row_n1 = (loader && next1) ? tile_row(p, b, ti + 3) : 0;
        named_bar_sync(kBarScale0, kThreads);  // m0 and scale0 are in shared memory
        const float scale0[2] = {sScale0[lrow[0]], sScale0[lrow[1]]};
        float scale1[2] = {1.f, 1.f}, lsum[2] = {0.f, 0.f};
        if (has1) softmax_rows(sv, (ti + 1) * kTile, lim, tq, scale_log2, sM, lrow, scale1, lsum);
        if (tq == 0) {
          sScale1[lrow[0]] = scale1[0];
          sScale1[lrow[1]] = scale1[1];
        }
        named_bar_arrive(kBarScale1, kThreads);
        const float both[2] = {scale1[0] * scale0[0], scale1[1] * scale0[1]};
        l_run[0] = l_run[0] * both[0] + lsum[0];
        l_run[1] = l_run[1] * both[1] + lsum[1];
        scale_rows(acc, both);
        if (has1) {
          const float one[2] = {1.f, 1.f};
          pack_p(sv, pa, one);
          store_p(sP1, pa, lrow, tq);
          fence_proxy_async();  // P1 (generic stores) is read by wg0's wgmma
          const int valid1 = min(kTile, L - (ti + 1) * kTile);
          if (valid1 < kTile) zero_tail(sK1, 4, valid1, tid, 1);
          fence_acc(acc);
          fence_frag(pa);
          gmma::fence();
          issue_pv_regs(acc, pa, lo_k, kOffK1, 1);  // O_R += P1 V1_R
          gmma::commit();
        }
        named_bar_sync(kBarP0, kThreads);  // P0' is in shared memory
        const int valid0 = min(kTile, L - ti * kTile);
        if (valid0 < kTile) zero_tail(sK0, 4, valid0, tid, 1);
        fence_acc(acc);
        gmma::fence();
        issue_pv_smem(acc, lo_k, kOffP0, kOffK0, 1);  // O_R += P0' V0_R
        gmma::commit();
        if (has1) named_bar_arrive(kBarP1, kThreads);
        if (next1) {
          gmma::wait<1>();  // O_R += P1 V1_R is done: V1_R's blocks (and the rope block) are free
          if (loader) load_blocks<4, kBlocks, EF>(p, kv_map, row_n1, sK1, bars1);
        }
        gmma::wait<0>();  // O_R += P0' V0_R is done
        fence_acc(acc);
        fence_frag(pa);
        if (loader && next0) load_blocks<4, kBlocks, EF>(p, kv_map, row_n0, sK0, bars0);
        if (next1) {  // S of the next pair's second tile: blocks 4..8 (freed first), then 0..3
          gmma::fence();
          issue_s_blocks<4, kBlocks, true>(sv, lo_k, kOffK1, bars1, phase1, q8);
          issue_s_blocks<0, 4, false>(sv, lo_k, kOffK1, bars1, phase1, q8);
          gmma::commit();
          gmma::wait<0>();
          phase1 ^= 1;
        }
        fence_acc(sv);
      }
    }
    // ---- epilogue: l = both halves' sums; each warpgroup stores its 256 columns ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if (tq == 0) sL[wg * 64 + lrow[h]] = l;
    }
    named_bar_sync(kBarEpilogue, kThreads);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lrow[h];
      if (r >= rows) continue;
      const float l = sL[lrow[h]] + sL[64 + lrow[h]];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (sM[lrow[h]] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, wg * 256 + 2 * tq, 32,
                [&](int n) { return make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]); }, inv, lse,
                wg == 0 && tq == 0);
    }
  }
}

template <bool RF, bool EF>
void launch_seesaw(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  static bool attr_set = false;
  auto kernel = decode_split_seesaw_kernel<RF, EF>;
  cuda::set_smem_limit_once(kernel, kMaxSmemPerBlock, attr_set, "mla decode split kernel (seesaw path) smem limit");
  launch(kernel, RF ? dim3(row_blocks, p.num_parts) : dim3(p.num_parts, row_blocks), dim3(kThreads), kSmemBytes,
         stream, false, "split kernel (seesaw) launch", static_cast<const CUtensorMap*>(w.map), p,
         static_cast<const int32_t*>(w.info), static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc);
}

}  // namespace

void launch_manyhead_seesaw(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks,
                            cudaStream_t stream) {
  if (p.d_c != 512 || p.d_r != 64)
    throw InputError("mla decode params: the seesaw path takes d_c = 512, d_r = 64 (got d_c = " +
                     std::to_string(p.d_c) + ", d_r = " + std::to_string(p.d_r) + ")");
  // EXPERIMENT (removed before merging): MLA_SEESAW_EXP bit 0 = grid rows-first, bit 1 = evict-first
  static const int exp = [] { const char* e = std::getenv("MLA_SEESAW_EXP"); return e ? std::atoi(e) : 0; }();
  switch (exp & 3) {
    case 0: launch_seesaw<false, false>(p, w, row_blocks, stream); break;
    case 1: launch_seesaw<true, false>(p, w, row_blocks, stream); break;
    case 2: launch_seesaw<false, true>(p, w, row_blocks, stream); break;
    default: launch_seesaw<true, true>(p, w, row_blocks, stream); break;
  }
}

}  // namespace mla::kernels::detail
