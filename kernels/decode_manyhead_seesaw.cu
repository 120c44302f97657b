// The seesaw path (d_c = 512, d_r = 64, > 16 query rows: the v6 path's shapes at DeepSeek's and
// Kimi-K2's widths): wgmma, 64-row blocks, 64-token tiles taken in pairs (A in buffer K0, B in
// buffer K1), FlashMLA's sm90 dense decode arrangement written for our scheduler, cache view and
// rounding points:
//   warpgroup 0 owns O's columns 0..255 (O_L), warpgroup 1 columns 256..511 (O_R);
//   S_A = Q K_A^T on warpgroup 0, S_B = Q K_B^T on warpgroup 1 (each the whole 576-wide product),
//   so one warpgroup's softmax runs under the other's tensor-core work (v6 ran every S and
//   softmax on warpgroup 0, the tensor cores idle during each softmax: 73% busy against
//   FlashMLA's 82% at locked clocks, docs/gpu-notes.md session 16);
//   wg0: softmax(A); O_L = O_L a_A + P_A V_A_L; P_A to shared memory
//   wg1: softmax(B) (after A's running max); O_R = O_R a_A + P_A V_A_R; O_R = O_R a_B + P_B V_B_R
//   wg0: O_L = O_L a_B + P_B V_B_L (P_B from shared memory)
// Every tile is the twin's ordinary 64-token tile (no pair rounding: P_A is not pre-scaled by
// a_B as FlashMLA's is; warpgroup 1 waits for P_A V_A_R before it rescales by a_B, with the
// running-max slack a_B is 1 on nearly every tile), the row sums follow the twin's per-thread
// chain on warpgroup 0 (B's partial sums pass through shared memory), and S's k-steps run in
// v6's order, so the outputs are v6's bit for bit.
// No producer warp: each 64-column block of a buffer is reloaded by the warpgroup that used it
// last, as soon as that use completes (one mbarrier per block, armed by the loading thread): the
// rope block after the S that read it, V_L's blocks after warpgroup 0's P.V, V_R's after warpgroup
// 1's. Q's rope block lives in registers (an RS wgmma), so its shared memory holds P_B. Each request
// segment starts its pipeline afresh (Q, the first two tiles).
#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_ring.cuh"
#include "kernels/decode_softmax.cuh"
#include "kernels/decode_store.cuh"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels::detail {
namespace {

using quant::kPartInfoInts;
constexpr int kTile = 64;        // tokens per tile (the twin's tile on this path)
constexpr int kThreads = 256;    // two warpgroups, no producer
constexpr int kDim = 576;        // d_c + d_r
constexpr int kBlocks = 9;       // 64-column blocks of a row
constexpr uint32_t kBlockBytes = 8192;  // 64 tokens (or rows) x 128 bytes, 128-byte swizzle
constexpr uint32_t kBufBytes = kBlocks * kBlockBytes;

// Shared memory after the 1 KB alignment: Q (block 8 read into registers, then P_B's), the two
// tile buffers, P_A, the row floats, 18 mbarriers and the merge flag: 232,352 of 232,448 bytes.
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffPB = 8 * kBlockBytes;
constexpr uint32_t kOffK0 = kBlocks * kBlockBytes;
constexpr uint32_t kOffK1 = kOffK0 + kBufBytes;
constexpr uint32_t kOffPA = kOffK1 + kBufBytes;
constexpr uint32_t kOffFloats = kOffPA + kBlockBytes;  // sM[64], sScaleA[64], sScaleB[64], sLsumB[256]
constexpr uint32_t kOffBars = kOffFloats + 448 * 4;    // K0's 9 mbarriers, K1's 9, the merge flag
constexpr size_t kSmemBytes = 1024 + kOffBars + 2 * kBlocks * 8 + 16;
static_assert(kSmemBytes <= kMaxSmemPerBlock, "seesaw shared memory");

// Named barriers (0 is __syncthreads; 8 and 9 are the fused merge's).
enum : int {
  kBarSegment = 1,  // all 256: a segment's start (buffers, Q, row floats free), and its epilogue
  kBarM = 2,        // wg0 arrives (A's running max and factors written), wg1 waits
  kBarPA = 3,       // wg0 arrives (P_A in shared memory), wg1 waits
  kBarB = 4,        // wg1 arrives (B's max, factors, partial sums and P_B written), wg0 waits
  kBarP0Free = 5,   // wg1 arrives (its P_A V_A_R is done), wg0 waits before the next P_A
  kBarP1Free = 6,   // wg0 arrives (its P_B V_B_L is done), wg1 waits before the next P_B
  kBarZero0 = 7,    // warpgroup 0's tail-row zeroing (128 threads)
  kBarTicket = 8,
  kBarMerge = 9,
  kBarZero1 = 10,   // warpgroup 1's
  kBarVote1 = 11,   // warpgroup 1: whether any of its rows has a factor != 1 for B (128 threads)
};

// The cache row of tile ti's first token (-kTile for a bad page id: the copy engine fills rows
// before the tensor's start with zeros; flagged, as the producer ring does).
__device__ __forceinline__ int tile_row(const quant::Bf16DecodeParams& p, int b, int ti) {
  const int j0 = ti * kTile;
  const int slot = j0 / p.page_size;
  const int page = slot < p.max_pages ? p.page_table[static_cast<size_t>(b) * p.max_pages + slot] : -1;
  const bool ok = page >= 0 && page < p.num_pages;
  if (!ok && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
  return ok ? page * p.page_size + j0 % p.page_size : -kTile;
}
// One thread: loads blocks [KB0, KB1) of the tile at cache row `row` into the buffer at buf, each
// block completing on its own mbarrier (armed here).
template <int KB0, int KB1>
__device__ __forceinline__ void load_blocks(const CUtensorMap* map, int row, uint32_t buf, uint32_t bars) {
#pragma unroll
  for (int kb = KB0; kb < KB1; ++kb) {
    mbar_arrive_expect_tx(bars + 8 * kb, kBlockBytes);
    tma_load_2d(buf + kb * kBlockBytes, map, kb * 64, row, bars + 8 * kb);
  }
}
template <int N>
__device__ __forceinline__ void fence_acc(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) gmma::fence_operand(acc[i]);
}
// S (+)= Q K^T over blocks [KB0, KB1) of a tile buffer (descriptor dk), each block after its
// mbarrier and as its own commit group (as FlashMLA's: a wait loop between the wgmmas of one
// group made ptxas drain the pipeline before it); Q's blocks 0..7 from shared memory (dq), block 8
// from the rope fragments q8. The k-steps in v6's order; the first one overwrites the accumulators.
template <int KB0, int KB1, int ZKB = 0>
__device__ __forceinline__ void issue_s_blocks(float (&sv)[32], uint64_t dq, uint64_t dk, uint32_t bars,
                                               uint32_t phase, const uint32_t (&q8)[4][4]) {
  // Opaque to the compiler, so that the k-steps' descriptors are formed here, an add each, and not
  // hoisted out of the tile loop (the buffers are fixed: 32 loop-invariant 64-bit descriptors
  // spilled on warpgroup 0).
  asm volatile("" : "+l"(dq), "+l"(dk));
#pragma unroll
  for (int kb = KB0; kb < KB1; ++kb) {
    mbar_wait(bars + 8 * kb, phase);
    fence_acc(sv);
    gmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t off = kb * kBlockBytes + kk * 32;
      if (kb == ZKB && kk == 0) gmma::wgmma_ss_n64_first(sv, gmma_desc_at(dq, off), gmma_desc_at(dk, off));
      else if (kb < 8) gmma::wgmma_ss_n64(sv, gmma_desc_at(dq, off), gmma_desc_at(dk, off));
      else gmma::wgmma_rs_n64_kmajor(sv, q8[kk], gmma_desc_at(dk, off));
    }
    gmma::commit();
    fence_acc(sv);
  }
}
__device__ __forceinline__ void fence_frag(uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int r = 0; r < 4; ++r) gmma::fence_operand(pa[ks][r]);
}
// O = O * f per row (f = 1 for both of this thread's rows: nothing to do, as v6).
__device__ __forceinline__ void rescale(float (&acc)[128], const float (&f)[2]) {
  if (f[0] != 1.f || f[1] != 1.f) {
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] *= f[(i >> 1) & 1];
  }
}
// O (this warpgroup's 256 columns) += P V over one tile, V = the four blocks at v (MN-major; a
// k-step of 16 tokens is 2 KB), P from registers (RS) or from the 64 x 64 tile at sp (SS); one
// commit group.
__device__ __forceinline__ void issue_pv_regs(float (&acc)[128], uint32_t (&pa)[4][4], uint32_t v) {
  fence_acc(acc);
  fence_frag(pa);
  gmma::fence();
  const uint64_t dv = gmma_desc(v, 8192, 1024);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) gmma::wgmma_rs_n256(acc, pa[ks], gmma_desc_at(dv, ks * 2048));
  gmma::commit();
}
__device__ __forceinline__ void issue_pv_smem(float (&acc)[128], uint32_t sp, uint32_t v) {
  fence_acc(acc);
  gmma::fence();
  const uint64_t dp = gmma_desc(sp, 16, 1024), dv = gmma_desc(v, 8192, 1024);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) gmma::wgmma_ss_n256_tb(acc, gmma_desc_at(dp, ks * 32), gmma_desc_at(dv, ks * 2048));
  gmma::commit();
}
// P fragments into a 64 x 64 bf16 tile at sp (128-byte-swizzled K-major: wgmma's A layout).
__device__ __forceinline__ void store_p(uint32_t sp, const uint32_t (&pa)[4][4], const int (&lrow)[2], int tq) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = lrow[h];
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sp + r * 128 + ((n ^ (r & 7)) << 4) + 4 * tq),
                   "r"(pa[n >> 1][(n & 1) * 2 + h])
                   : "memory");
    }
}
// Whether v holds for any thread of this warpgroup (a barrier of its 128 threads): a uniform
// condition, as a wgmma.wait in a branch needs.
__device__ __forceinline__ bool warpgroup_any(bool v, int bar) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, 128, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(v)), "r"(bar)
      : "memory");
  return r != 0;
}
// Zeroes rows >= valid of the four blocks at v (pages past L may hold NaN, which must not reach
// P.V) with this warpgroup's 128 threads, visible to its wgmma after the barrier.
__device__ __forceinline__ void zero_tail4(uint32_t v, int valid, int tid, int bar) {
  for (int c = tid; c < 4 * kTile * 8; c += 128) {
    const int r = (c >> 3) % kTile;
    if (r >= valid) st_shared_v4(v + c * 16, make_uint4(0u, 0u, 0u, 0u));
  }
  fence_proxy_async();
  named_bar_sync(bar, 128);
}

__global__ void __launch_bounds__(kThreads, 1)
    decode_split_seesaw_kernel(const __grid_constant__ CUtensorMap kv_map, const quant::Bf16DecodeParams p,
                               const int32_t* __restrict__ info, const int32_t* __restrict__ offsets,
                               float* __restrict__ o_acc, float* __restrict__ lse_acc, int32_t* __restrict__ merge_cnt,
                               const bool fuse_merge) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ = base + kOffQ, sPB = base + kOffPB, sK0 = base + kOffK0, sK1 = base + kOffK1,
                 sPA = base + kOffPA;
  float* sM = reinterpret_cast<float*>(gbase + kOffFloats);  // [64] running max (both warpgroups)
  float* sScaleA = sM + 64;                                  // [64] A's factors; the epilogue's 1 / l
  float* sScaleB = sM + 128;                                 // [64] B's factors; the epilogue's LSE
  float* sLsumB = sM + 192;                                  // [128 threads][2] B's partial row sums
  const uint32_t bars0 = base + kOffBars, bars1 = bars0 + 8 * kBlocks;
  volatile int* merge_flag = reinterpret_cast<int*>(gbase + kOffBars + 2 * kBlocks * 8);
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2 * kBlocks; ++i) mbar_init(bars0 + 8 * i, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  griddep_wait();
  // The role as a warp-uniform value ptxas can see (else it serialises the RS wgmmas).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = threadIdx.x % 128, wiw = tid / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const bool loader = tid == 0;  // this warpgroup's TMA thread
  const CUtensorMap* map = &kv_map;
  const int32_t* in = info + blockIdx.y * kPartInfoInts;  // grid: split_grid (row blocks, parts)
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * 64;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  int lrow[2], lim_off[2];  // this thread's two rows in the block, and their causal offsets
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lrow[h] = wiw * 16 + g + 8 * h;
    const int tok = min((row0 + lrow[h]) / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  const uint64_t dq = gmma_desc(sQ, 16, 1024), dk0 = gmma_desc(sK0, 16, 1024), dk1 = gmma_desc(sK1, 16, 1024);
  uint32_t phase0 = 0, phase1 = 0;  // K0's barriers (waited by wg0), K1's (wg1)
  int split = in[4];
  int merge_b0 = -1, merge_b1 = -1;  // requests whose last split this CTA stored (at most its first and last)
  for (int b = begin_b, t = begin_t; part_has_segment(b, t, end_b, end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kTile);
    const int n_split = offsets[b + 1] - offsets[b];
    named_bar_sync(kBarSegment, kThreads);  // the previous segment is done with every buffer
    if (threadIdx.x == 0 && t < stop) {
      load_blocks<0, kBlocks>(map, tile_row(p, b, t), sK0, bars0);
      if (t + 1 < stop) load_blocks<0, kBlocks>(map, tile_row(p, b, t + 1), sK1, bars1);
    }
    issue_q_rows(p, b, row0, sQ, threadIdx.x, kThreads);
    uint32_t q8[4][4];  // Q's rope block as A fragments (rows g, g + 8; columns 2 tq, 8 + 2 tq of each k-step)
    {
      const bf16* qb = reinterpret_cast<const bf16*>(p.q) + static_cast<size_t>(b) * rows * kDim;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r4 = 0; r4 < 4; ++r4) {
          const int r = row0 + lrow[r4 & 1];
          const int col = 512 + kk * 16 + 2 * tq + ((r4 >> 1) << 3);
          q8[kk][r4] = r < rows ? *reinterpret_cast<const uint32_t*>(qb + static_cast<size_t>(r) * kDim + col) : 0u;
        }
    }
    if (threadIdx.x < 64) sM[threadIdx.x] = neg_inf;
    cp_async_wait_all();
    fence_proxy_async();
    named_bar_sync(kBarSegment, kThreads);  // Q and the running max are in place

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    float l_run[2] = {0.f, 0.f};  // warpgroup 0: the rows' sums, per thread (the twin's chain)
    float sv[32];
    uint32_t pa[4][4];
    if (t < stop && wg == 0) {
      // ---- warpgroup 0: O_L, the pairs' first tiles (buffer K0) ----
      issue_s_blocks<0, kBlocks>(sv, dq, dk0, bars0, phase0, q8);
      gmma::wait<0>();
      fence_acc(sv);
      phase0 ^= 1;
      for (int ti = t; ti < stop; ti += 2) {
        const bool has_b = ti + 1 < stop, next_a = ti + 2 < stop, next_b = ti + 3 < stop;
        const int row_a = (loader && next_a) ? tile_row(p, b, ti + 2) : 0;
        const int row_b = (loader && next_b) ? tile_row(p, b, ti + 3) : 0;
        if (loader && next_a) load_blocks<8, 9>(map, row_a, sK0, bars0);  // the rope block: S_A was its last reader
        float m_run[2] = {sM[lrow[0]], sM[lrow[1]]}, m_use[2], fa[2];
        softmax_max(sv, ti * kTile, L, lim_off, tq, scale_log2, m_run, m_use, fa);
        __syncwarp();  // the quad's reads of sM before its update
        if (tq == 0) {
          sM[lrow[0]] = m_run[0];
          sM[lrow[1]] = m_run[1];
          sScaleA[lrow[0]] = fa[0];
          sScaleA[lrow[1]] = fa[1];
        }
        named_bar_arrive(kBarM, kThreads);
        rescale(acc, fa);
        softmax_exp(sv, m_use, fa, l_run);
        pack_p_fragments(sv, pa);
        const int valid_a = tile_rows_in_length<kTile>(L, ti);
        if (valid_a < kTile) zero_tail4(sK0, valid_a, tid, kBarZero0);
        issue_pv_regs(acc, pa, sK0);                            // O_L += P_A V_A_L
        if (ti > t) named_bar_sync(kBarP0Free, kThreads);  // wg1's P_A V_A_R of the previous pair is done
        store_p(sPA, pa, lrow, tq);
        fence_proxy_async();  // P_A (generic stores) is read by wg1's wgmma (async proxy)
        named_bar_arrive(kBarPA, kThreads);
        gmma::wait<0>();
        fence_acc(acc);
        fence_frag(pa);
        if (loader && next_a) load_blocks<0, 4>(map, row_a, sK0, bars0);  // V_A_L's blocks are free
        if (has_b) {
          named_bar_sync(kBarB, kThreads);  // B's factors, partial sums and P_B are in shared memory
          const float fb[2] = {sScaleB[lrow[0]], sScaleB[lrow[1]]};
          rescale(acc, fb);
#pragma unroll
          for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * fb[h] + sLsumB[tid * 2 + h];
          const int valid_b = tile_rows_in_length<kTile>(L, ti + 1);
          if (valid_b < kTile) zero_tail4(sK1, valid_b, tid, kBarZero0);
          issue_pv_smem(acc, sPB, sK1);  // O_L += P_B V_B_L
        }
        if (next_a) {  // S of the next pair's first tile; next_a implies has_b
          issue_s_blocks<0, 4>(sv, dq, dk0, bars0, phase0, q8);
          gmma::wait<4>();  // P_B V_B_L (the group before S's four) is done: V_B_L's blocks and P_B's buffer are free
          if (loader && next_b) load_blocks<0, 4>(map, row_b, sK1, bars1);
          if (next_b) named_bar_arrive(kBarP1Free, kThreads);
          issue_s_blocks<4, kBlocks>(sv, dq, dk0, bars0, phase0, q8);
          phase0 ^= 1;
        }
        gmma::wait<0>();
        fence_acc(acc);
        fence_acc(sv);
      }
    } else if (t < stop) {
      // ---- warpgroup 1: O_R, the pairs' second tiles (buffer K1) ----
      if (t + 1 < stop) {
        issue_s_blocks<0, kBlocks>(sv, dq, dk1, bars1, phase1, q8);
        gmma::wait<0>();
        fence_acc(sv);
        phase1 ^= 1;
      }
      for (int ti = t; ti < stop; ti += 2) {
        const bool has_b = ti + 1 < stop, next_a = ti + 2 < stop, next_b = ti + 3 < stop;
        const int row_a = (loader && next_a) ? tile_row(p, b, ti + 2) : 0;
        const int row_b = (loader && next_b) ? tile_row(p, b, ti + 3) : 0;
        if (loader && next_b) load_blocks<8, 9>(map, row_b, sK1, bars1);  // the rope block: S_B was its last reader
        named_bar_sync(kBarM, kThreads);  // the running max after A, and A's factors
        float fb[2] = {1.f, 1.f}, m_use[2];
        if (has_b) {
          float m_run[2] = {sM[lrow[0]], sM[lrow[1]]};
          softmax_max(sv, (ti + 1) * kTile, L, lim_off, tq, scale_log2, m_run, m_use, fb);
          __syncwarp();
          if (tq == 0) {
            sM[lrow[0]] = m_run[0];
            sM[lrow[1]] = m_run[1];
            sScaleB[lrow[0]] = fb[0];
            sScaleB[lrow[1]] = fb[1];
          }
        }
        const float fa[2] = {sScaleA[lrow[0]], sScaleA[lrow[1]]};
        rescale(acc, fa);
        if (has_b) {
          // PROBE (FlashMLA's order, not the twin's): O_R scaled by both factors, P_B V_B_R first, then
          // P_A V_A_R with P_A not pre-scaled (exact only where a_B = 1).
          rescale(acc, fb);
          float lsum[2] = {0.f, 0.f};
          const float one[2] = {1.f, 1.f};
          softmax_exp(sv, m_use, one, lsum);
          pack_p_fragments(sv, pa);
          if (ti > t) named_bar_sync(kBarP1Free, kThreads);
          store_p(sPB, pa, lrow, tq);
          sLsumB[tid * 2] = lsum[0];
          sLsumB[tid * 2 + 1] = lsum[1];
          fence_proxy_async();
          named_bar_arrive(kBarB, kThreads);
          const int valid_b = tile_rows_in_length<kTile>(L, ti + 1);
          if (valid_b < kTile) zero_tail4(sK1 + 4 * kBlockBytes, valid_b, tid, kBarZero1);
          issue_pv_regs(acc, pa, sK1 + 4 * kBlockBytes);  // O_R += P_B V_B_R
        }
        named_bar_sync(kBarPA, kThreads);  // P_A is in shared memory
        const int valid_a = tile_rows_in_length<kTile>(L, ti);
        if (valid_a < kTile) zero_tail4(sK0 + 4 * kBlockBytes, valid_a, tid, kBarZero1);
        issue_pv_smem(acc, sPA, sK0 + 4 * kBlockBytes);  // O_R += P_A V_A_R
        if (has_b) {
          gmma::wait<1>();  // P_B V_B_R is done: V_B_R's blocks are free
          if (loader && next_b) load_blocks<4, 8>(map, row_b, sK1, bars1);
        }
        gmma::wait<0>();
        fence_acc(acc);
        fence_frag(pa);
        if (loader && next_a) load_blocks<4, 8>(map, row_a, sK0, bars0);  // V_A_R's blocks are free
        if (next_a) named_bar_arrive(kBarP0Free, kThreads);
        if (next_b) {  // S of the next pair's second tile: its own blocks (released first) first
          issue_s_blocks<4, kBlocks, 4>(sv, dq, dk1, bars1, phase1, q8);
          issue_s_blocks<0, 4, 4>(sv, dq, dk1, bars1, phase1, q8);
          gmma::wait<0>();
          phase1 ^= 1;
        }
        gmma::wait<0>();
        fence_acc(acc);
        fence_acc(sv);
      }
    }
    // ---- epilogue: 1 / l and the LSE from warpgroup 0's sums; each warpgroup stores its 256 columns ----
    named_bar_sync(kBarSegment, kThreads);  // both warpgroups are done with the row floats of the loop
    if (wg == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (tq == 0) {
          sScaleA[lrow[h]] = l > 0.f ? 1.f / l : 0.f;
          sScaleB[lrow[h]] = l > 0.f ? (sM[lrow[h]] + log2f(l)) * kLn2 : neg_inf;
        }
      }
    }
    named_bar_sync(kBarSegment, kThreads);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lrow[h];
      if (r >= rows) continue;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, wg * 256 + 2 * tq, 32,
                [&](int n) { return make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]); }, sScaleA[lrow[h]],
                sScaleB[lrow[h]], wg == 0 && tq == 0);
    }
    // The combine, fused (fuse_merge: v6_fuses_merge), as v6.
    if (fuse_merge && n_split > 1 &&
        take_merge_ticket(merge_cnt, b * gridDim.x + blockIdx.x, n_split, threadIdx.x, kThreads, kBarTicket,
                          merge_flag)) {
      if (merge_b0 < 0) merge_b0 = b;
      else merge_b1 = b;
    }
  }
  named_bar_sync(kBarSegment, kThreads);  // the last epilogue is done with the row floats
  if (merge_b0 >= 0)
    merge_request<512, 64, kThreads, 16>(p, o_acc, lse_acc, offsets, merge_b0, rows, row0, threadIdx.x, sScaleB,
                                         kBarMerge);
  if (merge_b1 >= 0)
    merge_request<512, 64, kThreads, 16>(p, o_acc, lse_acc, offsets, merge_b1, rows, row0, threadIdx.x, sScaleB,
                                         kBarMerge);
}

}  // namespace

void launch_manyhead_seesaw(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  if (p.d_c != 512 || p.d_r != 64)
    throw InputError("mla decode params: the seesaw path takes d_c = 512, d_r = 64 (got d_c = " +
                     std::to_string(p.d_c) + ", d_r = " + std::to_string(p.d_r) + ")");
  static cuda::SmemLimitSet attr_set;
  cuda::set_smem_limit_once(decode_split_seesaw_kernel, kMaxSmemPerBlock, attr_set,
                            "mla decode split kernel (seesaw path) smem limit");
  launch(decode_split_seesaw_kernel, split_grid(p.num_parts, row_blocks), dim3(kThreads), kSmemBytes, stream, false,
         "split kernel (seesaw) launch", make_kv_map(p, kTile), p, static_cast<const int32_t*>(w.info),
         static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc, w.merge_cnt, v6_fuses_merge(p));
}

}  // namespace mla::kernels::detail
