// BF16 paged absorbed-MLA decode (see mla_decode.hpp and quant/decode_twin_bf16.hpp).
//
// Split kernel: a CTA owns one row block (16 or 64 query rows = (token, head) pairs of one
// request) and walks its part's (request, tile) run. Warps are RG row groups x NWC column
// groups: for S = Q K^T a warp computes its 16 rows x (BN / NWC) tokens over the full
// d_c + d_r; the row max is exchanged through shared memory; P (bf16) goes to shared memory;
// for O += P V a warp owns its 16 rows x (d_c / NWC) output columns (V = the tile's first d_c
// columns, read through ldmatrix.trans). K/V tiles stream in with cp.async, STAGES deep,
// zero-filled past the request's length so NaN-poisoned page tails never reach P.V.
#include "kernels/mla_decode.hpp"

#include <cuda.h>
#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>

#include <cstdlib>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "kernels/wgmma_ops.cuh"

namespace mla::kernels {
namespace {

using bf16 = __nv_bfloat16;
using quant::kPartInfoInts;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy; src_bytes = 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}
// D += A (16x16 bf16, row) * B (16x8 bf16, col), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- mbarrier + bulk copy (sm_90) for the v3 producer/consumer ring ----
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Copies `bytes` (multiple of 16, both addresses 16-byte aligned) global -> shared; completes
// as transaction bytes on `bar`.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Programmatic dependent launch: a kernel launched with the PDL attribute may start while the
// previous kernel in the stream runs; griddep_wait() blocks until that kernel has completed and
// its memory is visible (a no-op without the attribute).
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Diagnostics of the v3 ring (variant 3 only): [0] consumer-warp cycles in tile loops, [1] of
// which waiting for a full stage, [2] producer cycles in its loop, [3] of which waiting for an
// empty stage. Summed over warps (lane 0) and runs.
__device__ unsigned long long g_v3_diag[4];

// Source of the rows of a tile past the request's length (or of a tile with a bad page id):
// zeros, so NaN-poisoned page tails never reach P.V. d_c + d_r <= 640.
__device__ __align__(16) uint16_t g_zero_row[640];

// Writes one query row's output columns held by this thread: pair(n) is the (unscaled) fp32
// pair for columns col0 + 8 n + {0, 1}, n < npairs, scaled by inv; bf16 into out when the
// request has one split, else fp32 into its split's partial. with_lse also writes the row's LSE.
template <class Pair>
__device__ __forceinline__ void store_row(const quant::Bf16DecodeParams& p, float* o_acc, float* lse_acc, int b,
                                          int split, int n_split, int r, int col0, int npairs, Pair pair, float inv,
                                          float lse, bool with_lse) {
  const int rows = p.s_q * p.heads;
  if (n_split == 1) {
    bf16* dst = reinterpret_cast<bf16*>(p.out) + (static_cast<size_t>(b) * rows + r) * p.d_c + col0;
#pragma unroll
    for (int n = 0; n < npairs; ++n) {
      const float2 v = pair(n);
      *reinterpret_cast<__nv_bfloat162*>(dst + n * 8) = __floats2bfloat162_rn(v.x * inv, v.y * inv);
    }
    if (with_lse) p.lse[static_cast<size_t>(b) * rows + r] = lse;
  } else {
    float* dst = o_acc + (static_cast<size_t>(split) * rows + r) * p.d_c + col0;
#pragma unroll
    for (int n = 0; n < npairs; ++n) {
      const float2 v = pair(n);
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(v.x * inv, v.y * inv);
    }
    if (with_lse) lse_acc[static_cast<size_t>(split) * rows + r] = lse;
  }
}

// Merges splits [s0, s1) of request b, row r by their natural-log LSE in fp32 (threads t of
// `threads`, 4 columns each): the combine kernel's arithmetic, shared with the fused merge of
// variant 6. Partials are read through L2 (__ldcg): in the fused merge other CTAs wrote them.
__device__ __forceinline__ void merge_splits_row(const quant::Bf16DecodeParams& p, const float* o_acc,
                                                 const float* lse_acc, int b, int r, int s0, int s1, int t,
                                                 int threads) {
  const int rows = p.s_q * p.heads;
  const float neg_inf = -__int_as_float(0x7f800000);
  float m = neg_inf;
  for (int s = s0; s < s1; ++s) m = fmaxf(m, __ldcg(lse_acc + static_cast<size_t>(s) * rows + r));
  float lse = neg_inf;
  if (m != neg_inf) {
    float sum = 0.f;
    for (int s = s0; s < s1; ++s) sum += expf(__ldcg(lse_acc + static_cast<size_t>(s) * rows + r) - m);
    lse = m + logf(sum);
  }
  bf16* dst = reinterpret_cast<bf16*>(p.out) + (static_cast<size_t>(b) * rows + r) * p.d_c;
  for (int c = t * 4; c < p.d_c; c += threads * 4) {
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (m != neg_inf) {
      for (int s = s0; s < s1; ++s) {
        const float w = expf(__ldcg(lse_acc + static_cast<size_t>(s) * rows + r) - lse);
        const float4 v = __ldcg(reinterpret_cast<const float4*>(o_acc + (static_cast<size_t>(s) * rows + r) * p.d_c + c));
        o.x += w * v.x;
        o.y += w * v.y;
        o.z += w * v.z;
        o.w += w * v.w;
      }
    }
    *reinterpret_cast<__nv_bfloat162*>(dst + c) = __floats2bfloat162_rn(o.x, o.y);
    *reinterpret_cast<__nv_bfloat162*>(dst + c + 2) = __floats2bfloat162_rn(o.z, o.w);
  }
  if (t == 0) p.lse[static_cast<size_t>(b) * rows + r] = lse;
}

template <int DC, int RG, int NWC, int BN, int STAGES, int MIN_CTAS>
struct SplitCfg {
  static constexpr int kWarps = RG * NWC;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * RG;
  static constexpr int kTokPerWarp = BN / NWC;  // S columns of one warp
  static constexpr int kNtS = kTokPerWarp / 8;
  static constexpr int kColsPerWarp = DC / NWC;  // O columns of one warp
  static constexpr int kNtO = kColsPerWarp / 8;
  static constexpr int kPStride = BN + 8;  // +16 B per row: conflict-free ldmatrix
  static_assert(kNtS >= 1 && kNtO >= 1 && BN % 16 == 0, "tile shape");
  // Shared bytes for a row of `dim` values (+16 B pad per row, see above).
  static constexpr size_t smem_bytes(int dim) {
    const size_t srow = static_cast<size_t>(dim) + 8;
    return (kRows * srow + STAGES * BN * srow + kRows * kPStride) * 2 + 2 * NWC * kRows * sizeof(float);
  }
};

// v2's scheduler (one thread walking every (part, request) pair), kept for the variant = 2
// timing comparison only.
__device__ void legacy_compute_decode_schedule(const int32_t* seqlens, int batch, int tile,
                                           int num_parts, int32_t* part_info,
                                           int32_t* split_offsets) {
  long long total = 0;
  for (int b = 0; b < batch; ++b) {
    total += quant::decode_tiles(seqlens[b], tile) + quant::kFixedCost;
    split_offsets[b] = 0;
  }
  split_offsets[batch] = 0;
  // Each part boundary that cuts a request costs one more quant::kFixedCost: budget for it, so the
  // last part (which takes whatever is left) is not overloaded.
  total += static_cast<long long>(num_parts) * quant::kFixedCost;
  long long per_part = (total + num_parts - 1) / num_parts;
  if (per_part < quant::kFixedCost + 1) per_part = quant::kFixedCost + 1;
  int b = 0, t = 0, split = 0;
  for (int p = 0; p < num_parts; ++p) {
    int32_t* info = part_info + p * kPartInfoInts;
    info[0] = b;
    info[1] = t;
    info[4] = split;
    int end_b = b, end_t = t;
    const bool last = (p == num_parts - 1);
    long long budget = per_part;
    while (b < batch && (last || budget > quant::kFixedCost)) {
      const int n_tiles = quant::decode_tiles(seqlens[b], tile);
      int take = n_tiles - t;
      if (!last && budget - quant::kFixedCost < take) take = static_cast<int>(budget - quant::kFixedCost);
      split_offsets[b] += 1;  // count now, prefix-sum below
      ++split;
      budget -= take + quant::kFixedCost;
      t += take;
      end_b = b;
      end_t = t;
      if (t == n_tiles) {  // request finished: the next one starts at tile 0
        ++b;
        t = 0;
      }
    }
    info[2] = end_b;
    info[3] = end_t;
  }
  // counts -> offsets
  int run = 0;
  for (int i = 0; i < batch; ++i) {
    const int c = split_offsets[i];
    split_offsets[i] = run;
    run += c;
  }
  split_offsets[batch] = run;
}

__global__ void decode_schedule_legacy_kernel(const int32_t* seqlens, int batch, int tile, int parts,
                                              int32_t* info, int32_t* offsets) {
  if (threadIdx.x == 0 && blockIdx.x == 0) legacy_compute_decode_schedule(seqlens, batch, tile, parts, info, offsets);
}

// v3 scheduler: quant::compute_decode_schedule's closed form with one thread per request
// (block-wide prefix sums over chunks of kSchedThreads requests). Same output as the host.
constexpr int kSchedThreads = 512;
__global__ void __launch_bounds__(kSchedThreads) decode_schedule_kernel(const int32_t* __restrict__ seqlens, int batch,
                                                                        int tile, int parts, int32_t* info,
                                                                        int32_t* offsets, int32_t* counts,
                                                                        const CUtensorMap map, CUtensorMap* map_out) {
  using Scan = cub::BlockScan<long long, kSchedThreads>;
  __shared__ typename Scan::TempStorage tmp;
  griddep_launch_dependents();  // the split kernel may start its prologue; it waits for us
  const int tid = threadIdx.x;
  if (map_out != nullptr && tid == 0) {  // the wgmma path's TMA descriptor, into the workspace
    *map_out = map;
    asm volatile("fence.proxy.tensormap::generic.release.gpu;\n" ::: "memory");
  }
  long long mine = 0;
  for (int b = tid; b < batch; b += kSchedThreads) mine += quant::decode_tiles(seqlens[b], tile) + quant::kFixedCost;
  long long ignore = 0, total = 0;
  Scan(tmp).ExclusiveSum(mine, ignore, total);
  __syncthreads();
  const long long per_part = (total + parts - 1) / parts;
  long long carry_s = 0, carry_off = 0;
  for (int base = 0; base < batch; base += kSchedThreads) {
    const int b = base + tid;
    const bool valid = b < batch;
    const int n_b = valid ? quant::decode_tiles(seqlens[b], tile) : 0;
    long long s_b = 0, agg_s = 0;
    Scan(tmp).ExclusiveSum(valid ? static_cast<long long>(n_b + quant::kFixedCost) : 0LL, s_b, agg_s);
    __syncthreads();
    s_b += carry_s;
    const long long segs =
        valid ? quant::decode_last_part(s_b, n_b, per_part) - quant::decode_first_part(s_b, per_part) + 1 : 0;
    long long off_b = 0, agg_off = 0;
    Scan(tmp).ExclusiveSum(segs, off_b, agg_off);
    __syncthreads();
    off_b += carry_off;
    if (valid) {
      offsets[b] = static_cast<int32_t>(off_b);
      if (counts != nullptr) counts[b] = 0;
      quant::decode_write_parts_of_request(b, s_b, n_b, static_cast<int>(off_b), per_part, parts, info);
    }
    carry_s += agg_s;
    carry_off += agg_off;
  }
  const long long first_empty = (total + per_part - 1) / per_part;
  for (long long pp = first_empty + tid; pp < parts; pp += kSchedThreads)
    quant::decode_write_tail_part(static_cast<int>(pp), batch, static_cast<int>(carry_off), info);
  __syncthreads();
  if (tid == 0) {
    offsets[batch] = static_cast<int32_t>(carry_off);
    info[(parts - 1) * kPartInfoInts + 2] = batch;
    info[(parts - 1) * kPartInfoInts + 3] = 0;
  }
}

// Walks a (row, chunk) grid of 16-byte chunks with a fixed stride, without a division per step.
struct ChunkWalker {
  int r, k;
  const int dr, dk, cpr;
  __device__ ChunkWalker(int start, int stride, int chunks_per_row)
      : r(start / chunks_per_row), k(start % chunks_per_row), dr(stride / chunks_per_row),
        dk(stride % chunks_per_row), cpr(chunks_per_row) {}
  __device__ void next() {
    r += dr;
    k += dk;
    if (k >= cpr) {
      k -= cpr;
      ++r;
    }
  }
};

template <int DC, int RG, int NWC, int BN, int STAGES, int MIN_CTAS>
__global__ void __launch_bounds__(SplitCfg<DC, RG, NWC, BN, STAGES, MIN_CTAS>::kThreads, MIN_CTAS)
    decode_split_kernel(const quant::Bf16DecodeParams p, const int32_t* __restrict__ info,
                        const int32_t* __restrict__ offsets, float* __restrict__ o_acc,
                        float* __restrict__ lse_acc) {
  using C = SplitCfg<DC, RG, NWC, BN, STAGES, MIN_CTAS>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  griddep_wait();  // the schedule (previous kernel) is complete from here on
  const int dim = DC + p.d_r;
  const int srow = dim + 8;
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kRows][srow]
  bf16* sK = sQ + C::kRows * srow;               // [STAGES][BN][srow]
  bf16* sP = sK + STAGES * BN * srow;            // [kRows][kPStride]
  float* sMax = reinterpret_cast<float*>(sP + C::kRows * C::kPStride);  // [NWC][kRows]
  float* sSum = sMax + NWC * C::kRows;                                   // [NWC][kRows]

  const bf16* q = reinterpret_cast<const bf16*>(p.q);
  const bf16* cache = reinterpret_cast<const bf16*>(p.kv_cache);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rg = warp % RG, wc = warp / RG;
  const int g = lane / 4, tq = lane % 4;
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.y * C::kRows;
  const int chunks_per_row = dim / 8;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);

  // This thread's two rows (g and g + 8 of its row group) and their causal key limits' offsets.
  int my_row[2], lim_off[2];
  for (int h = 0; h < 2; ++h) {
    my_row[h] = row0 + rg * 16 + g + 8 * h;
    const int tok = min(my_row[h] / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }

  const int32_t* in = info + blockIdx.x * kPartInfoInts;
  int b = in[0], t = in[1], split = in[4];
  const int end_b = in[2], end_t = in[3];
  while (b < end_b || (b == end_b && t < end_t)) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
    const int n_split = offsets[b + 1] - offsets[b];
    const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;

    // Q block; rows past `rows` are zero-filled (their results are never written).
    {
      const bf16* qb = q + static_cast<size_t>(b) * rows * dim;
      ChunkWalker w(threadIdx.x, C::kThreads, chunks_per_row);
      for (; w.r < C::kRows; w.next()) {
        const int gr = row0 + w.r;
        const bool ok = gr < rows;
        cp_async_16(smem_u32(sQ + w.r * srow + w.k * 8), ok ? qb + static_cast<size_t>(gr) * dim + w.k * 8 : q, ok);
      }
    }
    auto load_tile = [&](int ti, int stage) {
      const int j0 = ti * BN;
      const bf16* base = cache;
      int valid = 0;
      if (j0 < L) {
        const int slot = j0 / p.page_size;
        const int page = slot < p.max_pages ? ptab[slot] : -1;
        if (page >= 0 && page < p.num_pages) {
          base = cache + (static_cast<size_t>(page) * p.page_size + j0 % p.page_size) * dim;
          valid = min(BN, L - j0);
        } else if (threadIdx.x == 0 && p.error_flag != nullptr) {
          atomicExch(p.error_flag, 1);  // bad device data: tile skipped (zero keys), flagged
        }
      }
      bf16* dst = sK + stage * BN * srow;
      ChunkWalker w(threadIdx.x, C::kThreads, chunks_per_row);
      for (; w.r < BN; w.next()) {
        const bool ok = w.r < valid;
        cp_async_16(smem_u32(dst + w.r * srow + w.k * 8), ok ? base + static_cast<size_t>(w.r) * dim + w.k * 8 : cache,
                    ok);
      }
    };

    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kNtO][4];
#pragma unroll
    for (int n = 0; n < C::kNtO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    const int nt = stop - t;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < nt) load_tile(t + s, s);
      cp_async_commit();  // the Q block rides in the first group
    }
    const uint32_t q_addr = smem_u32(sQ + (rg * 16 + (lane % 16)) * srow + (lane / 16) * 8);
    for (int i = 0; i < nt; ++i) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile i visible to all; every warp is done with tile i-1's stage
      {
        const int nx = i + STAGES - 1;
        if (nx < nt) load_tile(t + nx, nx % STAGES);
        cp_async_commit();
      }
      const bf16* sKs = sK + (i % STAGES) * BN * srow;

      // ---- S = Q K^T for 16 rows x kTokPerWarp tokens, fp32 ----
      float s_acc[C::kNtS][4];
#pragma unroll
      for (int n = 0; n < C::kNtS; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
      const uint32_t k_addr =
          smem_u32(sKs + (wc * C::kTokPerWarp + (lane % 8) + (lane / 16) * 8) * srow + ((lane / 8) & 1) * 8);
      const uint32_t k_addr_x2 = smem_u32(sKs + (wc * C::kTokPerWarp + (C::kNtS - 1) * 8 + (lane % 8)) * srow +
                                          ((lane / 8) & 1) * 8);
#pragma unroll 4
      for (int k0 = 0; k0 < dim; k0 += 16) {  // unrolled: several ldmatrix in flight per mma chain
        uint32_t a[4];
        ldsm_x4(q_addr + k0 * 2, a);
#pragma unroll
        for (int np = 0; np < C::kNtS / 2; ++np) {
          uint32_t bb[4];
          ldsm_x4(k_addr + (np * 16 * srow + k0) * 2, bb);
          mma_bf16(s_acc[2 * np], a, bb[0], bb[1]);
          mma_bf16(s_acc[2 * np + 1], a, bb[2], bb[3]);
        }
        if constexpr (C::kNtS % 2 == 1) {  // 8 tokens per warp: one n-tile, lanes 0-15 address it
          uint32_t b0, b1;
          ldsm_x2(k_addr_x2 + k0 * 2, b0, b1);
          mma_bf16(s_acc[C::kNtS - 1], a, b0, b1);
        }
      }

      // ---- scale into base 2, causal mask, row max across the CTA's column warps ----
      const int jbase = (t + i) * BN + wc * C::kTokPerWarp;
      float tmax[2] = {neg_inf, neg_inf};
#pragma unroll
      for (int n = 0; n < C::kNtS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const int j = jbase + n * 8 + 2 * tq + (e & 1);
          const float x = (j < L - lim_off[h]) ? s_acc[n][e] * scale_log2 : neg_inf;
          s_acc[n][e] = x;
          tmax[h] = fmaxf(tmax[h], x);
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
      }
      if (tq == 0) {
        sMax[wc * C::kRows + rg * 16 + g] = tmax[0];
        sMax[wc * C::kRows + rg * 16 + g + 8] = tmax[1];
      }
      __syncthreads();
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tm = neg_inf;
#pragma unroll
        for (int w = 0; w < NWC; ++w) tm = fmaxf(tm, sMax[w * C::kRows + rg * 16 + g + 8 * h]);
        const float m_new = fmaxf(m_run[h], tm);
        m_use[h] = (m_new == neg_inf) ? 0.f : m_new;  // nothing seen yet: avoid inf - inf
        alpha[h] = exp2f(m_run[h] - m_use[h]);
        m_run[h] = m_new;
      }
      float lsum[2] = {0.f, 0.f};
#pragma unroll
      for (int n = 0; n < C::kNtS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = exp2f(s_acc[n][e] - m_use[e >> 1]);
          lsum[e >> 1] += pv;
          s_acc[n][e] = pv;
        }
        const int col = wc * C::kTokPerWarp + n * 8 + 2 * tq;
        *reinterpret_cast<__nv_bfloat162*>(sP + (rg * 16 + g) * C::kPStride + col) =
            __floats2bfloat162_rn(s_acc[n][0], s_acc[n][1]);
        *reinterpret_cast<__nv_bfloat162*>(sP + (rg * 16 + g + 8) * C::kPStride + col) =
            __floats2bfloat162_rn(s_acc[n][2], s_acc[n][3]);
      }
      l_run[0] = l_run[0] * alpha[0] + lsum[0];  // per-thread partial sums, same alpha everywhere
      l_run[1] = l_run[1] * alpha[1] + lsum[1];
      __syncthreads();  // P complete

      // ---- O = O * alpha + P V for 16 rows x kColsPerWarp columns ----
#pragma unroll
      for (int n = 0; n < C::kNtO; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) {
        uint32_t a[4];
        ldsm_x4(smem_u32(sP + (rg * 16 + (lane % 16)) * C::kPStride + ks * 16 + (lane / 16) * 8), a);
        const bf16* vrow = sKs + (ks * 16 + (lane % 8) + ((lane / 8) & 1) * 8) * srow + wc * C::kColsPerWarp;
#pragma unroll
        for (int np = 0; np < C::kNtO / 2; ++np) {
          uint32_t bb[4];
          ldsm_x4_t(smem_u32(vrow + np * 16 + (lane / 16) * 8), bb);
          mma_bf16(acc[2 * np], a, bb[0], bb[1]);
          mma_bf16(acc[2 * np + 1], a, bb[2], bb[3]);
        }
        if constexpr (C::kNtO % 2 == 1) {
          uint32_t b0, b1;
          ldsm_x2_t(smem_u32(vrow + (C::kNtO - 1) * 8), b0, b1);
          mma_bf16(acc[C::kNtO - 1], a, b0, b1);
        }
      }
    }

    // ---- epilogue: total row sums, normalise, write final output or this split's partial ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    }
    if (tq == 0) {
      sSum[wc * C::kRows + rg * 16 + g] = l_run[0];
      sSum[wc * C::kRows + rg * 16 + g + 8] = l_run[1];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = 0.f;
#pragma unroll
      for (int w = 0; w < NWC; ++w) l += sSum[w * C::kRows + rg * 16 + g + 8 * h];
      const int r = my_row[h];
      if (r >= rows) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, wc * C::kColsPerWarp + 2 * tq, C::kNtO,
                [&](int n) { return make_float2(acc[n][2 * h], acc[n][2 * h + 1]); }, inv, lse, wc == 0 && tq == 0);
    }
    __syncthreads();  // sQ, sSum and the stages are reused by the next segment
    ++split;
    ++b;
    t = 0;
  }
}

// ---- v3 split kernel for <= 16 query rows (memory-bound decode, H <= 16) ----
// Two CTAs per SM (v3b; v3a ran one CTA with 5 stages and was bound by its 4 consumer warps),
// each 4 consumer warps + 1 producer warp. The producer walks the part's (request,
// tile) run and streams each 32-token tile into a STAGES-deep shared-memory ring with one
// bulk copy per token row (cp.async.bulk, completing on the stage's "full" mbarrier; rows past
// the request's length copy a zero row); consumers release a stage through its "empty"
// mbarrier. The ring runs across segment boundaries, so the next request's tiles are already
// in flight during an epilogue. S = Q K^T: warp w takes k-steps w, w + 4, ... of the d_c + d_r
// reduction for all 32 tokens (its Q fragments live in registers for the whole segment); the
// four fp32 partial tiles are exchanged through shared memory (double-buffered, one named
// barrier per tile) and every warp sums them in the same order ((w0 + w1) + w2) + w3, so all
// warps hold the same S, row max, P and l. P goes from the S accumulators straight into mma A
// fragments (bf16); O += P V: warp w owns d_c / 4 output columns (V by ldmatrix.trans).
constexpr int kV3Consumers = 4;
constexpr int kV3Threads = 32 * (kV3Consumers + 1);
constexpr int kV3BN = 32;
constexpr int kV3Stages = 2;  // per CTA, two CTAs per SM (v3b); v3a had 5 stages and one CTA per SM
constexpr int kV3PartFloats = 2 * kV3Consumers * 4 * 32 * 4;  // [2 buffers][warp][n-tile][lane][4]
constexpr int kV3Header = 128;  // mbarriers full[S], empty[S] (S <= 7); int at byte 120: "last split" flag

template <int DC, int STAGES = kV3Stages>
struct V3Cfg {
  static constexpr int kColsPerWarp = DC / kV3Consumers;
  static constexpr int kNtO = kColsPerWarp / 8;
  static constexpr int kKPerWarp = ((DC + 128) / 16 + kV3Consumers - 1) / kV3Consumers;
  static_assert(kNtO >= 1, "d_c >= 32");
  static constexpr size_t smem_bytes(int dim) {
    return kV3Header + kV3PartFloats * sizeof(float) + static_cast<size_t>(STAGES) * kV3BN * (dim + 8) * 2;
  }
};

template <int DC, int STAGES, int MIN_CTAS>
__global__ void __launch_bounds__(kV3Threads, MIN_CTAS)
    decode_split_v3_kernel(const quant::Bf16DecodeParams p, const int32_t* __restrict__ info,
                           const int32_t* __restrict__ offsets, float* o_acc, float* lse_acc, int32_t* counts) {
  using C = V3Cfg<DC, STAGES>;
  constexpr int BN = kV3BN, S = STAGES;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t bar0 = smem_u32(smem_raw);  // full[s] = bar0 + 8 s, empty[s] = bar0 + 8 (S + s)
  float4* sPart = reinterpret_cast<float4*>(smem_raw + kV3Header);
  const int dim = DC + p.d_r;
  const int srow = dim + 8;  // +16 B per row: conflict-free ldmatrix
  bf16* sK = reinterpret_cast<bf16*>(smem_raw + kV3Header + kV3PartFloats * sizeof(float));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(bar0 + 8 * s, 1);                   // the producer's arrive.expect_tx
      mbar_init(bar0 + 8 * (S + s), kV3Consumers);  // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  griddep_wait();  // the schedule (previous kernel) is complete from here on
  const bool diag = p.variant == 3;
  const bool tweaks = p.variant != 5;  // per-tile shortcuts below (variant 5: without, for timing)
  // Fused combine (variant 6, an experiment that measured slower: the merging CTA stalls its
  // ring on serial L2 round trips): the CTA that finishes a request's last split merges them.
  const bool fuse = counts != nullptr;
  volatile int* sLast = reinterpret_cast<volatile int*>(smem_raw + 120);
  long long diag_wait = 0, diag_t0 = diag ? clock64() : 0;

  const int32_t* in = info + blockIdx.x * kPartInfoInts;
  const int b_begin = in[0], t_begin = in[1], end_b = in[2], end_t = in[3];
  const bf16* cache = reinterpret_cast<const bf16*>(p.kv_cache);

  if (warp == kV3Consumers) {  // ---- producer warp ----
    const uint32_t tile_bytes = static_cast<uint32_t>(BN * dim * 2);
    int it = 0;
    for (int b = b_begin, t = t_begin; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
      const int L = p.seqlens[b];
      const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
      const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;
      int group_page = -1;  // lane l: page id of tile (group start + l), loaded 32 tiles at a time
      for (int ti = t; ti < stop; ++ti, ++it) {
        const int stage = it % S;
        // Page ids: one load per lane for the next 32 tiles (one L2 round trip per 32 tiles, not
        // per tile: a serial per-tile lookup capped v3a's producer), then wait for the stage, so
        // the copy is issued as soon as the consumers release it. Variant 5: one lookup per tile
        // after the wait, as committed in 7a142ce.
        if (!tweaks) mbar_wait(bar0 + 8 * (S + stage), ((it / S) & 1) ^ 1);
        const int j0 = ti * BN;
        if (tweaks && (ti - t) % 32 == 0) {
          const int jl = (ti + lane) * BN;
          const int slot = jl / p.page_size;
          group_page = (ti + lane < stop && jl < L && slot < p.max_pages) ? ptab[slot] : -1;
        }
        const bf16* base = nullptr;
        int valid = 0;
        if (j0 < L) {
          const int slot = j0 / p.page_size;
          const int page = tweaks ? __shfl_sync(0xffffffffu, group_page, (ti - t) % 32)
                                  : (slot < p.max_pages ? ptab[slot] : -1);
          if (page >= 0 && page < p.num_pages) {
            base = cache + (static_cast<size_t>(page) * p.page_size + j0 % p.page_size) * dim;
            valid = min(BN, L - j0);
          } else if (lane == 0 && p.error_flag != nullptr) {
            atomicExch(p.error_flag, 1);  // bad device data: tile skipped (zero keys), flagged
          }
        }
        const long long w0 = diag ? clock64() : 0;
        if (tweaks) mbar_wait(bar0 + 8 * (S + stage), ((it / S) & 1) ^ 1);
        if (diag) diag_wait += clock64() - w0;
        if (lane == 0) mbar_arrive_expect_tx(bar0 + 8 * stage, tile_bytes);
        __syncwarp();
        const void* src = lane < valid ? static_cast<const void*>(base + static_cast<size_t>(lane) * dim)
                                       : static_cast<const void*>(g_zero_row);
        bulk_g2s(smem_u32(sK + (stage * BN + lane) * srow), src, static_cast<uint32_t>(dim * 2), bar0 + 8 * stage);
      }
    }
    if (diag && lane == 0) {
      atomicAdd(&g_v3_diag[2], static_cast<unsigned long long>(clock64() - diag_t0));
      atomicAdd(&g_v3_diag[3], static_cast<unsigned long long>(diag_wait));
    }
    return;
  }

  // ---- consumer warps ----
  const bf16* q = reinterpret_cast<const bf16*>(p.q);
  const int g = lane / 4, tq = lane % 4;
  const int rows = p.s_q * p.heads;
  const int nk = dim / 16;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  int lim_off[2];
  for (int h = 0; h < 2; ++h) {
    const int tok = min((g + 8 * h) / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  const uint32_t k_lane_off = static_cast<uint32_t>((((lane % 8) + (lane / 16) * 8) * srow + ((lane / 8) & 1) * 8) * 2);
  const uint32_t v_lane_off = static_cast<uint32_t>((((lane % 8) + ((lane / 8) & 1) * 8) * srow + warp * C::kColsPerWarp +
                                                     (lane / 16) * 8) * 2);
  int it = 0, split = in[4];
  for (int b = b_begin, t = t_begin; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
    const int n_split = offsets[b + 1] - offsets[b];

    // Q fragments of this warp's k-steps (rows g, g + 8; rows past `rows` are zero).
    uint32_t qa[C::kKPerWarp][4];
    {
      const bf16* q0 = q + (static_cast<size_t>(b) * rows + g) * dim;
      const bf16* q1 = q0 + static_cast<size_t>(8) * dim;
      const bool ok0 = g < rows, ok1 = g + 8 < rows;
#pragma unroll
      for (int s = 0; s < C::kKPerWarp; ++s) {
        const int kk = warp + kV3Consumers * s;
        const int c = kk * 16 + 2 * tq;
        const bool in_k = kk < nk;
        qa[s][0] = (in_k && ok0) ? *reinterpret_cast<const uint32_t*>(q0 + c) : 0u;
        qa[s][1] = (in_k && ok1) ? *reinterpret_cast<const uint32_t*>(q1 + c) : 0u;
        qa[s][2] = (in_k && ok0) ? *reinterpret_cast<const uint32_t*>(q0 + c + 8) : 0u;
        qa[s][3] = (in_k && ok1) ? *reinterpret_cast<const uint32_t*>(q1 + c + 8) : 0u;
      }
    }

    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kNtO][4];
#pragma unroll
    for (int n = 0; n < C::kNtO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S;
      const long long w0 = diag ? clock64() : 0;
      mbar_wait(bar0 + 8 * stage, (it / S) & 1);
      if (diag) diag_wait += clock64() - w0;
      const uint32_t tile_addr = smem_u32(sK + stage * BN * srow);

      // ---- partial S = Q K^T over this warp's k-steps, 16 rows x 32 tokens ----
      float s_acc[4][4];
#pragma unroll
      for (int n = 0; n < 4; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
#pragma unroll
      for (int s = 0; s < C::kKPerWarp; ++s) {
        const int kk = warp + kV3Consumers * s;
        if (kk < nk) {
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            uint32_t bb[4];
            ldsm_x4(tile_addr + k_lane_off + (np * 16 * srow + kk * 16) * 2, bb);
            mma_bf16(s_acc[2 * np], qa[s], bb[0], bb[1]);
            mma_bf16(s_acc[2 * np + 1], qa[s], bb[2], bb[3]);
          }
        }
      }
      float4* part = sPart + (it & 1) * (kV3Consumers * 4 * 32);
#pragma unroll
      for (int n = 0; n < 4; ++n)
        part[(warp * 4 + n) * 32 + lane] = make_float4(s_acc[n][0], s_acc[n][1], s_acc[n][2], s_acc[n][3]);
      named_bar_sync(1, 32 * kV3Consumers);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        float4 tot = part[n * 32 + lane];
#pragma unroll
        for (int w = 1; w < kV3Consumers; ++w) {
          const float4 v = part[(w * 4 + n) * 32 + lane];
          tot.x += v.x;
          tot.y += v.y;
          tot.z += v.z;
          tot.w += v.w;
        }
        s_acc[n][0] = tot.x;
        s_acc[n][1] = tot.y;
        s_acc[n][2] = tot.z;
        s_acc[n][3] = tot.w;
      }

      // ---- scale into base 2, causal mask, row max over the 32 tokens (4 lanes) ----
      const int jbase = ti * BN;
      float tmax[2] = {neg_inf, neg_inf};
      if (tweaks && jbase + BN <= L - (p.s_q - 1)) {  // every key of the tile visible to every row
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s_acc[n][e] *= scale_log2;
            tmax[e >> 1] = fmaxf(tmax[e >> 1], s_acc[n][e]);
          }
      } else {
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e >> 1;
            const int j = jbase + n * 8 + 2 * tq + (e & 1);
            const float x = (j < L - lim_off[h]) ? s_acc[n][e] * scale_log2 : neg_inf;
            s_acc[n][e] = x;
            tmax[h] = fmaxf(tmax[h], x);
          }
      }
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
        const float m_new = fmaxf(m_run[h], tmax[h]);
        m_use[h] = (m_new == neg_inf) ? 0.f : m_new;  // nothing seen yet: avoid inf - inf
        alpha[h] = exp2f(m_run[h] - m_use[h]);
        m_run[h] = m_new;
      }
      float lsum[2] = {0.f, 0.f};
      uint32_t pa[2][4];  // P as the A fragments of the two 16-token k-steps
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = exp2f(s_acc[n][e] - m_use[e >> 1]);
          lsum[e >> 1] += pv;
          s_acc[n][e] = pv;
        }
        pa[n >> 1][(n & 1) * 2 + 0] = pack_bf16(s_acc[n][0], s_acc[n][1]);
        pa[n >> 1][(n & 1) * 2 + 1] = pack_bf16(s_acc[n][2], s_acc[n][3]);
      }
      l_run[0] = l_run[0] * alpha[0] + lsum[0];
      l_run[1] = l_run[1] * alpha[1] + lsum[1];

      // ---- O = O * alpha + P V for 16 rows x kColsPerWarp columns ----
      // alpha is exactly 1 where the row max did not move (exp2(0)): skip the rescale then.
      if (!tweaks || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int n = 0; n < C::kNtO; ++n) {
          acc[n][0] *= alpha[0];
          acc[n][1] *= alpha[0];
          acc[n][2] *= alpha[1];
          acc[n][3] *= alpha[1];
        }
      }
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint32_t vaddr = tile_addr + v_lane_off + ks * 16 * srow * 2;
#pragma unroll
        for (int np = 0; np < C::kNtO / 2; ++np) {
          uint32_t bb[4];
          ldsm_x4_t(vaddr + np * 16 * 2, bb);
          mma_bf16(acc[2 * np], pa[ks], bb[0], bb[1]);
          mma_bf16(acc[2 * np + 1], pa[ks], bb[2], bb[3]);
        }
        if constexpr (C::kNtO % 2 == 1) {  // lanes 0-15 address the last 8 columns
          uint32_t b0, b1;
          ldsm_x2_t(vaddr + (C::kNtO - 1) * 8 * 2 - (lane / 16) * 8 * 2, b0, b1);
          mma_bf16(acc[C::kNtO - 1], pa[ks], b0, b1);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + stage));  // this warp is done with the stage
    }

    // ---- epilogue: row sums (identical in every warp), normalise, write ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
      const int r = g + 8 * h;
      if (r >= rows) continue;
      const float l = l_run[h];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, warp * C::kColsPerWarp + 2 * tq, C::kNtO,
                [&](int n) { return make_float2(acc[n][2 * h], acc[n][2 * h + 1]); }, inv, lse, warp == 0 && tq == 0);
    }
    if (fuse && n_split > 1) {
      // Publish this split, count it; the CTA that counts the last one merges all of them,
      // exactly as decode_combine_kernel does (same order, fp32, expf/logf), from L2 (__ldcg).
      __threadfence();
      named_bar_sync(1, 32 * kV3Consumers);
      if (threadIdx.x == 0) *sLast = (atomicAdd(counts + b, 1) == n_split - 1);
      named_bar_sync(1, 32 * kV3Consumers);
      if (*sLast) {
        __threadfence();
        for (int r = 0; r < rows; ++r)
          merge_splits_row(p, o_acc, lse_acc, b, r, offsets[b], offsets[b + 1], threadIdx.x, 32 * kV3Consumers);
      }
    }
  }
  if (diag && lane == 0) {
    atomicAdd(&g_v3_diag[0], static_cast<unsigned long long>(clock64() - diag_t0));
    atomicAdd(&g_v3_diag[1], static_cast<unsigned long long>(diag_wait));
  }
}

// ---- v4 split kernel for > 16 query rows (many heads): wgmma (sm_90a), variant 9 ----
// ~1.5x the mma.sync 64-row path at H=128 on an H200 (docs/gpu-notes.md, v4/v5); v6 below
// (64-token tiles) is the default and ~1.8x faster again. The TMA
// descriptor comes from the workspace (a __grid_constant__ parameter was read stale) and the
// launches use no programmatic dependent launch (with it, splits came back unwritten).
// PIPE = true (variant 8, v5): S of tile i+1 overlapped with P.V of tile i; not faster.
// A CTA = 2 consumer warpgroups + 1 producer warp, one 64-row block, the part's (request, tile)
// run in 32-token tiles (the twin's tile: same online-softmax order). Shared memory holds Q
// (64 x (d_c + d_r)) and a 3-stage ring of K tiles in the 128-byte-swizzled K-major layout
// wgmma reads through matrix descriptors: 64-column blocks of rows of 128 B, 8-row atoms of
// 1 KB. The producer loads each tile with one TMA box (64 columns x 32 tokens, swizzle 128B)
// per 64-column block from its page, onto the stage's "full" mbarrier; rows past the request's
// length are zeroed by the consumers before use (pages past L may hold NaN). S = Q K^T: warpgroup
// w takes k-steps [w * nk/2, (w + 1) * nk/2) (wgmma m64n32k16, both operands from shared
// memory); the two fp32 partial tiles are exchanged through shared memory (double-buffered, one
// named barrier per tile) and summed (a + b: identical in both), so both warpgroups hold the same
// S, row max, P and l. P (bf16) goes from the S accumulators into wgmma A registers; O += P V:
// warpgroup w owns O columns [w d_c/2, (w+1) d_c/2) (wgmma m64n(d_c/2)k16, V = the tile's first
// d_c columns read MN-major through a descriptor with tnspB). Rounding points as the twin.
constexpr int kV4BN = 32;
constexpr int kV4Stages = 3;
constexpr int kV4Threads = 384;  // 2 consumer warpgroups + 1 producer warpgroup (setmaxnreg)
constexpr size_t kV4MaxSmem = 232448;  // 227 KB opt-in per block on sm_90

template <int DC>
struct V4Cfg {
  static constexpr int kNHalf = DC / 2;     // O columns per warpgroup
  static constexpr int kOReg = kNHalf / 2;  // fp32 accumulators per thread: 64 x kNHalf / 128
  static constexpr size_t smem_bytes(int dim) {
    const size_t nblk = (static_cast<size_t>(dim) + 63) / 64;
    return 1024 + nblk * 8192 + kV4Stages * nblk * kV4BN * 128 + 2 * 2 * 16 * 128 * 4 + 256;
  }
};

// Shared-memory matrix descriptor, 128-byte swizzle (layout type 1).
__device__ __forceinline__ uint64_t gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = static_cast<uint64_t>((saddr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}


// ---- shared pieces of the wgmma paths (v4/v5, v6, v7) ----
// The full/empty mbarrier ring of the wgmma paths (full[s] at bar0 + 8 s: the producer's arrive
// + TMA bytes; empty[s] at bar0 + 8 (S + s): one arrive per consumer warp), initialised by
// thread 0 before any thread uses it; then waits for the schedule (the previous kernel).
__device__ __forceinline__ void init_ring(uint32_t bar0, int stages) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(bar0 + 8 * s, 1);
      mbar_init(bar0 + 8 * (stages + s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  griddep_wait();
}
// The producer thread: walks the part's (request, tile) run and loads each BN-token tile with
// one TMA box (64 columns x BN tokens) per 64-column block into an S-stage full/empty mbarrier
// ring; a tile with a bad page id completes its stage without data (the consumers zero it) and
// is flagged. The map lives in the workspace, written by the scheduler kernel (complete since
// griddep_wait): it is acquired into the tensormap proxy before the first TMA.
template <int BN, int S>
__device__ void produce_tiles(const quant::Bf16DecodeParams& p, const CUtensorMap* map, const int32_t* in,
                              uint32_t sK, uint32_t stage_bytes, int nblk, uint32_t bar0) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map) : "memory");
  const int end_b = in[2], end_t = in[3];
  int it = 0;
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
    const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;
    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S;
      const int j0 = ti * BN;
      const int slot = j0 / p.page_size;
      const int page = slot < p.max_pages ? ptab[slot] : -1;
      const bool ok = page >= 0 && page < p.num_pages;
      if (!ok && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
      mbar_wait(bar0 + 8 * (S + stage), ((it / S) & 1) ^ 1);
      if (ok) {
        const int row = page * p.page_size + j0 % p.page_size;
        mbar_arrive_expect_tx(bar0 + 8 * stage, stage_bytes);
        const uint32_t dst = sK + stage * stage_bytes;
        for (int kb = 0; kb < nblk; ++kb) tma_load_2d(dst + kb * BN * 128, map, kb * 64, row, bar0 + 8 * stage);
      } else {
        mbar_arrive(bar0 + 8 * stage);
      }
    }
  }
}
// Rows of tile ti (BN tokens) that hold cache data: 0 for a bad page id (the producer's rule).
template <int BN>
__device__ __forceinline__ int tile_valid_rows(const quant::Bf16DecodeParams& p, int b, int L, int ti) {
  const int j0 = ti * BN;
  const int slot = j0 / p.page_size;
  const int page = slot < p.max_pages ? p.page_table[static_cast<size_t>(b) * p.max_pages + slot] : -1;
  return (page >= 0 && page < p.num_pages) ? min(BN, L - j0) : 0;
}
// Zeroes the rows >= valid of a stage (nblk blocks of BN rows x 128 B) with `threads` threads
// (thread index `t`): pages past L may hold NaN, which must not reach P.V. Makes the stores
// visible to wgmma (async proxy); the caller's barrier publishes them.
template <int BN>
__device__ __forceinline__ void zero_tail_rows(uint32_t tile, int valid, int nblk, int t, int threads) {
  for (int c = t; c < nblk * BN * 8; c += threads) {
    const int r = (c >> 3) % BN;
    if (r >= valid) st_shared_v4(tile + c * 16, make_uint4(0u, 0u, 0u, 0u));
  }
  fence_proxy_async();
}
// Q rows [rbase, rbase + 64) of request b into the 128-byte-swizzled K-major layout at dst
// (64-column blocks of 64 rows x 128 B), rows past `rows` as zeros; `threads` threads.
__device__ __forceinline__ void load_q_rows(const quant::Bf16DecodeParams& p, int b, int rbase, uint32_t dst, int t,
                                            int threads) {
  const int dim = p.d_c + p.d_r, rows = p.s_q * p.heads, cpr = dim / 8;
  const bf16* qb = reinterpret_cast<const bf16*>(p.q) + static_cast<size_t>(b) * rows * dim;
  for (int c = t; c < 64 * cpr; c += threads) {
    const int r = c / cpr, k = c - r * cpr;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (rbase + r < rows) v = *reinterpret_cast<const uint4*>(qb + static_cast<size_t>(rbase + r) * dim + k * 8);
    st_shared_v4(dst + (k >> 3) * 8192 + r * 128 + (((k & 7) ^ (r & 7)) << 4), v);
  }
  fence_proxy_async();  // generic stores -> read by wgmma (async proxy)
}
// S = Q K^T for one 64-token tile, completed: 64 query rows at sq, the tile's 64 keys at tile
// (both 128-byte-swizzled K-major blocks of 8 KB), nk k-steps of 16, wgmma m64n64k16.
__device__ __forceinline__ void compute_s64(float (&sv)[32], uint32_t sq, uint32_t tile, int nk) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    sv[i] = 0.f;
    gmma::fence_operand(sv[i]);
  }
  gmma::fence();
  for (int kk = 0; kk < nk; ++kk) {
    const uint32_t kb = kk * 32;  // byte column: block kb / 128, 32-byte step within it
    gmma::wgmma_ss_n64(sv, gmma_desc(sq + (kb >> 7) * 8192 + (kb & 127), 16, 1024),
                       gmma_desc(tile + (kb >> 7) * 8192 + (kb & 127), 16, 1024));
  }
  gmma::commit();
  gmma::wait<0>();
#pragma unroll
  for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
}
// Online softmax of one tile of S held as NV accumulators (wgmma m64n(NV/2) layout: this
// thread's rows g and g + 8 of its warp's 16, columns 8 n + 2 tq + {0, 1}, tile columns from
// token j0): scale into base 2, causal/length mask, running max/sum update (rows live in one
// quad); sv becomes P (fp32), alpha the factor for O.
template <int NV>
__device__ __forceinline__ void softmax_tile(float (&sv)[NV], int j0, int L, const int (&lim_off)[2], int tq,
                                             float scale_log2, float (&m_run)[2], float (&l_run)[2], float (&alpha)[2]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float tmax[2] = {neg_inf, neg_inf};
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int h = (i >> 1) & 1;
    const int j = j0 + (i >> 2) * 8 + 2 * tq + (i & 1);
    const float x = (j < L - lim_off[h]) ? sv[i] * scale_log2 : neg_inf;
    sv[i] = x;
    tmax[h] = fmaxf(tmax[h], x);
  }
  float m_use[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
    const float m_new = fmaxf(m_run[h], tmax[h]);
    m_use[h] = (m_new == neg_inf) ? 0.f : m_new;
    alpha[h] = exp2f(m_run[h] - m_use[h]);
    m_run[h] = m_new;
  }
  float lsum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const float pv = exp2f(sv[i] - m_use[(i >> 1) & 1]);
    lsum[(i >> 1) & 1] += pv;
    sv[i] = pv;
  }
  l_run[0] = l_run[0] * alpha[0] + lsum[0];
  l_run[1] = l_run[1] * alpha[1] + lsum[1];
}
template <int DC, bool PIPE>
__global__ void __launch_bounds__(kV4Threads, 1)
    decode_split_v4_kernel(const CUtensorMap* kv_map, const quant::Bf16DecodeParams p,
                           const int32_t* __restrict__ info, const int32_t* __restrict__ offsets,
                           float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = V4Cfg<DC>;
  constexpr int S = kV4Stages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);
  const int dim = DC + p.d_r;
  const int nblk = (dim + 63) / 64;
  const int nk = dim / 16;
  const uint32_t sQ = base;
  const uint32_t stage_bytes = nblk * kV4BN * 128;
  const uint32_t sK = sQ + nblk * 8192;
  float* sX = reinterpret_cast<float*>(gbase + nblk * 8192 + S * stage_bytes);  // [2][2][16][128]
  unsigned char* bars = reinterpret_cast<unsigned char*>(sX + 2 * 2 * 16 * 128);
  const uint32_t bar0 = smem_u32(bars);  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_ring(bar0, S);
  const int32_t* in = info + blockIdx.x * kPartInfoInts;
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.y * 64;

  if (warp >= 8) {  // ---- producer warpgroup: one thread issues the TMA loads ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8 && lane == 0) produce_tiles<kV4BN, S>(p, kv_map, in, sK, stage_bytes, nblk, bar0);
  } else {
  // ---- consumers: warpgroups 0 and 1 ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int wg = warp / 4, wiw = warp % 4, tid = threadIdx.x % 128;
  const int g = lane / 4, tq = lane % 4;
  const float scale_log2 = p.scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  int my_row[2], lim_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    my_row[h] = row0 + wiw * 16 + g + 8 * h;
    const int tok = min(my_row[h] / p.heads, p.s_q - 1);
    lim_off[h] = p.s_q - 1 - tok;
  }
  const int nkh = nk / 2;  // k-steps per warpgroup (d_c + d_r is a multiple of 32 on this path)
  const uint32_t k_byte0 = wg * nkh * 32;  // this warpgroup's first column, in bytes
  int split = in[4];
  int it = 0;
  for (int b = begin_b, t = begin_t; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kV4BN);
    const int n_split = offsets[b + 1] - offsets[b];
    named_bar_sync(1, 256);  // both warpgroups are done reading the previous segment's Q
    load_q_rows(p, b, row0, sQ, threadIdx.x, 256);
    named_bar_sync(1, 256);
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kOReg];
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) acc[i] = 0.f;

    // Waits for tile ti's stage (CTA tile counter it_) and zeroes its rows past L (the producer's
    // rule, recomputed here: pages past L may hold NaN, which must not reach P.V).
    auto wait_tile = [&](int it_, int ti_) -> uint32_t {
      const int stage = it_ % S;
      mbar_wait(bar0 + 8 * stage, (it_ / S) & 1);
      const int valid = tile_valid_rows<kV4BN>(p, b, L, ti_);
      const uint32_t tile = sK + stage * stage_bytes;
      if (valid < kV4BN) {
        zero_tail_rows<kV4BN>(tile, valid, nblk, threadIdx.x, 256);
        named_bar_sync(2, 256);
      }
      return tile;
    };
    // Issues S partial = Q K^T over this warpgroup's k-steps (one commit group). The caller zeroes
    // sacc and issues gmma::fence() first.
    auto issue_s = [&](float (&sacc)[16], uint32_t tile) {
      for (int kk = 0; kk < nkh; ++kk) {
        const uint32_t kb = k_byte0 + kk * 32;  // byte column: block kb / 128, 32-byte step within it
        const uint64_t da = gmma_desc(sQ + (kb >> 7) * 8192 + (kb & 127), 16, 1024);
        const uint64_t db = gmma_desc(tile + (kb >> 7) * (kV4BN * 128) + (kb & 127), 16, 1024);
        gmma::wgmma_ss_n32(sacc, da, db);
      }
      gmma::commit();
    };
    auto zero_s = [&](float (&sacc)[16]) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        sacc[i] = 0.f;
        gmma::fence_operand(sacc[i]);
      }
    };
    // Completed S partial of tile ti_ -> summed with the other warpgroup's -> online softmax:
    // updates m_run / l_run, returns P (bf16 A fragments) and the O rescale factors.
    auto exchange_softmax = [&](float (&sv)[16], int it_, int ti_, uint32_t (&pa)[2][4], float (&alpha)[2]) {
#pragma unroll
      for (int i = 0; i < 16; ++i) gmma::fence_operand(sv[i]);
      {
        float* mine = sX + ((it_ & 1) * 2 + wg) * 16 * 128;
        const float* other = sX + ((it_ & 1) * 2 + (wg ^ 1)) * 16 * 128;
#pragma unroll
        for (int i = 0; i < 16; ++i) mine[i * 128 + tid] = sv[i];
        named_bar_sync(3, 256);
#pragma unroll
        for (int i = 0; i < 16; ++i) sv[i] = sv[i] + other[i * 128 + tid];  // a + b == b + a: same S in both
      }
      softmax_tile(sv, ti_ * kV4BN, L, lim_off, tq, scale_log2, m_run, l_run, alpha);
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const int n0 = 2 * ks, n1 = 2 * ks + 1;
        pa[ks][0] = pack_bf16(sv[n0 * 4 + 0], sv[n0 * 4 + 1]);
        pa[ks][1] = pack_bf16(sv[n0 * 4 + 2], sv[n0 * 4 + 3]);
        pa[ks][2] = pack_bf16(sv[n1 * 4 + 0], sv[n1 * 4 + 1]);
        pa[ks][3] = pack_bf16(sv[n1 * 4 + 2], sv[n1 * 4 + 3]);
      }
    };
    // O = O * alpha, skipped when no row max of this thread moved (alpha == 1: bit-identical).
    auto rescale_o = [&](const float (&alpha)[2]) {
      if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) acc[i] *= alpha[(i >> 1) & 1];
      }
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
    };
    // Issues O += P V over this warpgroup's d_c / 2 columns (one commit group); after
    // gmma::fence() like issue_s.
    auto issue_pv = [&](const uint32_t (&pa)[2][4], uint32_t tile) {
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint64_t dv = gmma_desc(tile + wg * (DC / 128) * (kV4BN * 128) + ks * 2048, kV4BN * 128, 1024);
        if constexpr (C::kNHalf == 256) gmma::wgmma_rs_n256(acc, pa[ks], dv);
        else if constexpr (C::kNHalf == 128) gmma::wgmma_rs_n128(acc, pa[ks], dv);
        else gmma::wgmma_rs_n64(acc, pa[ks], dv);
      }
      gmma::commit();
    };
    auto release_tile = [&](int it_) {
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + it_ % S));  // this warp is done with the stage
    };

    if constexpr (!PIPE) {  // v4 as first written: S, softmax, P.V in series per tile
      for (int ti = t; ti < stop; ++ti, ++it) {
        const uint32_t tile = wait_tile(it, ti);
        float sv[16];
        zero_s(sv);
        gmma::fence();
        issue_s(sv, tile);
        gmma::wait<0>();
        uint32_t pa[2][4];
        float alpha[2];
        exchange_softmax(sv, it, ti, pa, alpha);
        rescale_o(alpha);
        gmma::fence();
        issue_pv(pa, tile);
        gmma::wait<0>();
        release_tile(it);
      }
    } else if (t < stop) {
      // Software pipeline (as FlashAttention-3): per tile i, S of tile i+1 and P.V of tile i are
      // issued back to back, the exchange + softmax of tile i+1 run while P.V of tile i occupies
      // the tensor cores, and O is rescaled for tile i+1 once P.V of tile i is done. P of tile
      // i+1 goes to other registers (pa is an operand of the P.V in flight). The last tile is
      // peeled: a conditional S issue inside the loop made ptxas serialise every wgmma (C7514).
      uint32_t tile = wait_tile(it, t);
      uint32_t pa[2][4];
      float alpha[2];
      {
        float sv[16];
        zero_s(sv);
        gmma::fence();
        issue_s(sv, tile);
        gmma::wait<0>();
        exchange_softmax(sv, it, t, pa, alpha);  // O is still 0: no rescale needed
      }
      for (int ti = t; ti + 1 < stop; ++ti, ++it) {
        float sn[16];
        const uint32_t tile_next = wait_tile(it + 1, ti + 1);
        zero_s(sn);
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
        gmma::fence();
        issue_s(sn, tile_next);
        issue_pv(pa, tile);
        uint32_t pn[2][4];
        gmma::wait<1>();  // S of tile i+1 done; P.V of tile i may still run
        exchange_softmax(sn, it + 1, ti + 1, pn, alpha);
        gmma::wait<0>();
        release_tile(it);
        rescale_o(alpha);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int r = 0; r < 4; ++r) pa[ks][r] = pn[ks][r];
        tile = tile_next;
      }
      gmma::fence();
      issue_pv(pa, tile);
      gmma::wait<0>();
      release_tile(it);
      ++it;
    }

    // ---- epilogue ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
      l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
      const int r = my_row[h];
      if (r >= rows) continue;
      const float l = l_run[h];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const float lse = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf;
      store_row(p, o_acc, lse_acc, b, split, n_split, r, wg * C::kNHalf + 2 * tq, C::kNHalf / 8,
                [&](int n) { return make_float2(acc[n * 4 + 2 * h], acc[n * 4 + 2 * h + 1]); }, inv, lse,
                wg == 0 && tq == 0);
    }
  }
  }  // consumers
}

// ---- v6 split kernel for > 16 query rows: wgmma with 64-token tiles (the default) ----
// FlashMLA's division of work instead of v4's split reduction: warpgroup 0 computes the whole
// S = Q K^T of a 64-token tile (wgmma m64n64k16, Q and K from shared memory), runs the online
// softmax and writes P (bf16, the wgmma K-major swizzled layout) and the per-row rescale factor
// to shared memory; then both warpgroups issue O += P V for their half of the d_c output
// columns (wgmma m64n(d_c/2)k16, A = P and B = V from shared memory) and do not wait for it:
// warpgroup 0's S of the next tile queues behind the two P.V on the tensor cores. No fp32 S
// exchange, two named barriers per 64 tokens. K tiles: 2-stage ring of one TMA box (64 columns
// x 64 tokens, 128-byte swizzle) per 64-column block; rows past L zeroed before use.
// Rounding points as the twin with 64-token tiles (quant::decode_tile_config_for).
constexpr int kV6BN = 64;
constexpr int kV6Stages = 2;

template <int DC>
struct V6Cfg {
  static constexpr int kNHalf = DC / 2;     // O columns per warpgroup
  static constexpr int kOReg = kNHalf / 2;  // fp32 accumulators per thread
  // 1 KB alignment slack, Q, the ring, P (64 x 64 bf16), 3 x 64 row floats, mbarriers.
  static constexpr size_t smem_bytes(int dim) {
    const size_t nblk = (static_cast<size_t>(dim) + 63) / 64;
    return 1024 + nblk * 8192 + kV6Stages * nblk * 8192 + 8192 + 3 * 64 * 4 + 256;
  }
};

template <int DC>
__global__ void __launch_bounds__(kV4Threads, 1)
    decode_split_v6_kernel(const CUtensorMap* kv_map, const quant::Bf16DecodeParams p,
                           const int32_t* __restrict__ info, const int32_t* __restrict__ offsets,
                           float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = V6Cfg<DC>;
  constexpr int S = kV6Stages;
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
  float* sScale = reinterpret_cast<float*>(gbase + (sP - base) + 8192);  // [64] alpha of the tile
  float* sInvL = sScale + 64;                                            // [64] 1 / l (epilogue)
  float* sLse = sInvL + 64;                                              // [64] (epilogue)
  const uint32_t bar0 = smem_u32(sLse + 64);  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_ring(bar0, S);
  const int32_t* in = info + blockIdx.x * kPartInfoInts;
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.y * 64;

  if (warp >= 8) {  // ---- producer warpgroup: one thread issues the TMA loads ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8 && lane == 0) produce_tiles<kV6BN, S>(p, kv_map, in, sK, stage_bytes, nblk, bar0);
    return;
  }
  // ---- consumers: warpgroup 0 (S, softmax, P, first half of O), warpgroup 1 (second half) ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
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
  for (int b = begin_b, t = begin_t; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kV6BN);
    const int n_split = offsets[b + 1] - offsets[b];
    named_bar_sync(1, 256);  // the previous segment is done with Q and the row floats
    load_q_rows(p, b, row0, sQ, threadIdx.x, 256);
    named_bar_sync(1, 256);
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};  // warpgroup 0 only
    float acc[C::kOReg];
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) acc[i] = 0.f;
    int pending = -1;  // tile counter of the stage this warp still has to release
    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S;
      const uint32_t tile = sK + stage * stage_bytes;
      gmma::wait<0>();  // this warpgroup's P.V of the previous tile is done
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
      if (pending >= 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar0 + 8 * (S + pending % S));
        pending = -1;
      }
      float alpha[2] = {1.f, 1.f};
      if (wg == 0) {
        mbar_wait(bar0 + 8 * stage, (it / S) & 1);
        const int j0 = ti * kV6BN;
        const int valid = tile_valid_rows<kV6BN>(p, b, L, ti);
        if (valid < kV6BN) {
          zero_tail_rows<kV6BN>(tile, valid, nblk, threadIdx.x, 128);
          named_bar_sync(2, 128);
        }
        float sv[32];
        compute_s64(sv, sQ, tile, nk);
        softmax_tile(sv, j0, L, lim_off, tq, scale_log2, m_run, l_run, alpha);
        named_bar_sync(3, 256);  // P buffer free: both warpgroups' P.V of the previous tile are done
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = lrow[h];
            const uint32_t v = pack_bf16(sv[n * 4 + 2 * h], sv[n * 4 + 2 * h + 1]);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sP + r * 128 + ((n ^ (r & 7)) << 4) + 4 * tq), "r"(v)
                         : "memory");
          }
        if (tq == 0) {
          sScale[lrow[0]] = alpha[0];
          sScale[lrow[1]] = alpha[1];
        }
        fence_proxy_async();  // P (generic stores) is read by wgmma (async proxy)
        named_bar_sync(4, 256);
      } else {
        named_bar_sync(3, 256);
        named_bar_sync(4, 256);  // P, the row factors and the zeroed tail rows are visible
        alpha[0] = sScale[lrow[0]];
        alpha[1] = sScale[lrow[1]];
      }
      // ---- O = O * alpha + P V over this warpgroup's d_c / 2 columns; not waited for here ----
      if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) acc[i] *= alpha[(i >> 1) & 1];
      }
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
      gmma::fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t da = gmma_desc(sP + ks * 32, 16, 1024);
        const uint64_t dv = gmma_desc(tile + wg * (DC / 128) * 8192 + ks * 2048, 8192, 1024);
        if constexpr (C::kNHalf == 256) gmma::wgmma_ss_n256_tb(acc, da, dv);
        else if constexpr (C::kNHalf == 128) gmma::wgmma_ss_n128_tb(acc, da, dv);
        else gmma::wgmma_ss_n64_tb(acc, da, dv);
      }
      gmma::commit();
      pending = it;
    }
    // ---- epilogue ----
    gmma::wait<0>();
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
    if (pending >= 0) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + pending % S));
    }
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
  }
}

// ---- v7 split kernel: > 64 query rows at d_c <= 256 (TPLA slices), 128-row blocks ----
// Each consumer warpgroup owns 64 rows and the whole d_c (O: 64 x d_c fp32 in registers), so
// the two warpgroups never exchange anything: each runs S = Q K^T (wgmma m64n64k16 from shared
// memory), the online softmax, and O += P V with P from registers (wgmma m64n(d_c)k16, V
// MN-major) on the same K tile; while one runs its softmax the other's wgmmas keep the tensor
// cores busy. One K tile (64 tokens, 3-stage TMA ring) feeds 128 rows, so a TPLA rank reads
// its half-size cache once instead of once per 64-row block (v6). Tile 64 as v6 and the twin.
constexpr int kV7Stages = 3;

template <int DC>
struct V7Cfg {
  static constexpr int kOReg = DC / 2;  // fp32 accumulators per thread: 64 x DC / 128
  // 1 KB alignment slack, Q (two 64-row halves), the ring, mbarriers.
  static constexpr size_t smem_bytes(int dim) {
    const size_t nblk = (static_cast<size_t>(dim) + 63) / 64;
    return 1024 + 2 * nblk * 8192 + kV7Stages * nblk * 8192 + 256;
  }
};

template <int DC>
__global__ void __launch_bounds__(kV4Threads, 1)
    decode_split_v7_kernel(const CUtensorMap* kv_map, const quant::Bf16DecodeParams p,
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
  const int32_t* in = info + blockIdx.x * kPartInfoInts;
  const int begin_b = in[0], begin_t = in[1], end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.y * 128;

  if (warp >= 8) {  // ---- producer warpgroup: one thread issues the TMA loads (as v6) ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8 && lane == 0) produce_tiles<kV6BN, S>(p, kv_map, in, sK, stage_bytes, nblk, bar0);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
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
  int split = in[4];
  int it = 0;
  for (int b = begin_b, t = begin_t; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kV6BN);
    const int n_split = offsets[b + 1] - offsets[b];
    load_q_rows(p, b, wrow0, myQ, tid, 128);  // this warpgroup's Q rows (its previous S is complete)
    named_bar_sync(1 + wg, 128);
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};
    float acc[C::kOReg];
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) acc[i] = 0.f;
    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S;
      const uint32_t tile = sK + stage * stage_bytes;
      mbar_wait(bar0 + 8 * stage, (it / S) & 1);
      const int j0 = ti * kV6BN;
      const int valid = tile_valid_rows<kV6BN>(p, b, L, ti);
      if (valid < kV6BN) {  // both warpgroups see the same valid: they zero the tail together
        zero_tail_rows<kV6BN>(tile, valid, nblk, threadIdx.x, 256);
        named_bar_sync(3, 256);
      }
      float sv[32];
      compute_s64(sv, myQ, tile, nk);
      float alpha[2];
      softmax_tile(sv, j0, L, lim_off, tq, scale_log2, m_run, l_run, alpha);
      uint32_t pa[4][4];  // P as wgmma A fragments, one per 16-token k-step
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const int n0 = 2 * ks, n1 = 2 * ks + 1;
        pa[ks][0] = pack_bf16(sv[n0 * 4 + 0], sv[n0 * 4 + 1]);
        pa[ks][1] = pack_bf16(sv[n0 * 4 + 2], sv[n0 * 4 + 3]);
        pa[ks][2] = pack_bf16(sv[n1 * 4 + 0], sv[n1 * 4 + 1]);
        pa[ks][3] = pack_bf16(sv[n1 * 4 + 2], sv[n1 * 4 + 3]);
      }
      if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
        for (int i = 0; i < C::kOReg; ++i) acc[i] *= alpha[(i >> 1) & 1];
      }
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
      gmma::fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t dv = gmma_desc(tile + ks * 2048, 8192, 1024);
        if constexpr (DC == 256) gmma::wgmma_rs_n256(acc, pa[ks], dv);
        else gmma::wgmma_rs_n128(acc, pa[ks], dv);
      }
      gmma::commit();
      gmma::wait<0>();
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
      __syncwarp();
      if (lane == 0) mbar_arrive(bar0 + 8 * (S + stage));
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
}

// One block per (request, row): merges the request's splits by natural-log LSE, in fp32.
__global__ void decode_combine_kernel(const quant::Bf16DecodeParams p, const int32_t* __restrict__ offsets,
                                      const float* __restrict__ o_acc, const float* __restrict__ lse_acc) {
  griddep_wait();  // the split kernel's partials are complete from here on
  const int b = blockIdx.x, r = blockIdx.y;
  const int s0 = offsets[b], s1 = offsets[b + 1];
  if (s1 - s0 <= 1) return;  // written directly by the split kernel
  merge_splits_row(p, o_acc, lse_acc, b, r, s0, s1, threadIdx.x, blockDim.x);
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("mla decode: ") + what + ": " + cudaGetErrorString(e));
}

// Launches kernel on `stream`; with pdl, as a programmatic dependent launch (it may start while
// the previous kernel runs and calls griddep_wait() before reading that kernel's output).
template <class... Exp, class... Act>
void launch(void (*kernel)(Exp...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, const char* what,
            Act&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, std::forward<Act>(args)...), what);
}
// Variants 0 (default), 3 (diagnostics), 4 (v3a: 1 CTA/SM x 5 stages) use programmatic dependent launches; 1, 2, 5 do not.
bool use_wgmma(const quant::Bf16DecodeParams& p);
// Programmatic dependent launches for variants 0 and 3..6, except on the wgmma paths: there, with
// PDL, requests with several splits (and second segments of a part) came back unwritten (NaN)
// in every GPU test run; without it, all passed (docs/gpu-notes.md, "v4 fixed"; cause not found).
bool use_pdl(const quant::Bf16DecodeParams& p) {
  if (use_wgmma(p) || quant::decode_uses_v6(p)) return false;
  return p.variant == 0 || (p.variant >= 3 && p.variant <= 6);
}
// Variant 6 (experiment, slower: docs/gpu-notes.md): <= 16 rows merge a request's splits inside
// the v3 split kernel (the CTA finishing the last split), no combine launch.
bool fused_combine(const quant::Bf16DecodeParams& p) { return p.s_q * p.heads <= 16 && p.variant == 6; }

struct Workspace {
  CUtensorMap* map;  // the wgmma path's TMA descriptor (quant::kDecodeMapBytes at the start)
  int32_t* info;
  int32_t* offsets;
  int32_t* counts;  // per request: splits finished (fused combine), zeroed by the scheduler
  float* lse_acc;
  float* o_acc;
};
// Same carving as quant::decode_workspace_bytes.
Workspace carve(const quant::Bf16DecodeParams& p) {
  const size_t rows = static_cast<size_t>(p.s_q) * p.heads;
  const size_t splits = quant::decode_max_splits(p.batch, p.num_parts);
  char* base = static_cast<char*>(p.workspace);
  size_t meta = quant::kDecodeMapBytes +
                (static_cast<size_t>(p.num_parts) * kPartInfoInts + 2 * static_cast<size_t>(p.batch) + 1) * sizeof(int32_t);
  meta = (meta + 255) / 256 * 256;
  size_t lse = splits * rows * sizeof(float);
  lse = (lse + 255) / 256 * 256;
  static_assert(sizeof(CUtensorMap) == quant::kDecodeMapBytes, "tensor map size");
  Workspace w;
  w.map = reinterpret_cast<CUtensorMap*>(base);
  w.info = reinterpret_cast<int32_t*>(base + quant::kDecodeMapBytes);
  w.offsets = w.info + static_cast<size_t>(p.num_parts) * kPartInfoInts;
  w.counts = w.offsets + p.batch + 1;
  w.lse_acc = reinterpret_cast<float*>(base + meta);
  w.o_acc = reinterpret_cast<float*>(base + meta + lse);
  return w;
}

template <int DC, int RG, int NWC, int BN, int STAGES, int MIN_CTAS>
void launch_split(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  using C = SplitCfg<DC, RG, NWC, BN, STAGES, MIN_CTAS>;
  auto kernel = decode_split_kernel<DC, RG, NWC, BN, STAGES, MIN_CTAS>;
  static bool attr_set = false;  // largest supported d_r (128) sets the ceiling once
  if (!attr_set) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(C::smem_bytes(DC + 128))),
               "cudaFuncSetAttribute(max dynamic shared memory)");
    attr_set = true;
  }
  launch(kernel, dim3(p.num_parts, row_blocks), dim3(C::kThreads), C::smem_bytes(DC + p.d_r), stream, use_pdl(p),
         "split kernel launch", p, static_cast<const int32_t*>(w.info), static_cast<const int32_t*>(w.offsets), w.o_acc,
         w.lse_acc);
}

template <int DC, int STAGES, int MIN_CTAS>
void launch_split_v3(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  using C = V3Cfg<DC, STAGES>;
  auto kernel = decode_split_v3_kernel<DC, STAGES, MIN_CTAS>;
  static bool attr_set = false;  // largest supported d_r (128) sets the ceiling once
  if (!attr_set) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(C::smem_bytes(DC + 128))),
               "cudaFuncSetAttribute(max dynamic shared memory, v3)");
    attr_set = true;
  }
  launch(kernel, dim3(p.num_parts), dim3(kV3Threads), C::smem_bytes(DC + p.d_r), stream, use_pdl(p),
         "split kernel (v3) launch", p, static_cast<const int32_t*>(w.info), static_cast<const int32_t*>(w.offsets),
         w.o_acc, w.lse_acc, fused_combine(p) ? w.counts : static_cast<int32_t*>(nullptr));
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = nullptr;
  if (fn == nullptr) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q),
               "driver entry point cuTensorMapEncodeTiled");
    if (f == nullptr || q != cudaDriverEntryPointSuccess) throw Error("mla decode: cuTensorMapEncodeTiled not found");
    fn = reinterpret_cast<EncodeTiledFn>(f);
  }
  return fn;
}
// The cache as a 2-D tensor [num_pages * page_size rows, d_c + d_r] bf16; box 64 columns x
// box_rows tokens (the path's tile: 32 for v4/v5, 64 for v6), 128-byte swizzle (the wgmma K-major layout); columns past d_c + d_r read as zeros.
CUtensorMap make_kv_map(const quant::Bf16DecodeParams& p, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dim = static_cast<cuuint64_t>(p.d_c + p.d_r);
  const cuuint64_t gdim[2] = {dim, static_cast<cuuint64_t>(p.num_pages) * p.page_size};
  const cuuint64_t gstride[1] = {dim * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(p.kv_cache), gdim,
                                    gstride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error("mla decode: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return m;
}

// The 32-token wgmma kernel (> 16 rows): variant 9 = v4, variant 8 = v5 (pipelined). Needs
// d_c >= 128, d_c + d_r a multiple of 32, and Q + 3 stages + exchange within 227 KB (d_r <= 64 at
// d_c = 512); other shapes take the mma.sync path. The default is v6 (quant::decode_uses_v6).
bool use_wgmma(const quant::Bf16DecodeParams& p) {
  if (p.s_q * p.heads <= 16 || (p.variant != 8 && p.variant != 9) || p.d_c < 128 || (p.d_c + p.d_r) % 32 != 0)
    return false;
  return V4Cfg<512>::smem_bytes(p.d_c + p.d_r) <= kV4MaxSmem;
}

// Launches a wgmma split kernel (v4/v5, v6, v7) that takes the workspace's tensor map: opt-in shared
// memory set once per kernel, no programmatic dependent launch (see use_pdl).
template <class Kernel>
void launch_wgmma(Kernel kernel, size_t smem, const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks,
                  cudaStream_t stream, bool& attr_set, const char* what) {
  if (!attr_set) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kV4MaxSmem)),
               what);
    attr_set = true;
  }
  launch(kernel, dim3(p.num_parts, row_blocks), dim3(kV4Threads), smem, stream, false, what,
         static_cast<const CUtensorMap*>(w.map), p, static_cast<const int32_t*>(w.info),
         static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc);
}
template <int DC>
void launch_split_v4(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  // Variant 9: v4 (no pipeline); variant 8: v5, the FA3-style pipeline (not faster, gpu-notes v5).
  static bool attr_v4 = false, attr_v5 = false;
  if (p.variant == 8)
    launch_wgmma(decode_split_v4_kernel<DC, true>, V4Cfg<DC>::smem_bytes(DC + p.d_r), p, w, row_blocks, stream, attr_v5,
                 "split kernel (v5) launch");
  else
    launch_wgmma(decode_split_v4_kernel<DC, false>, V4Cfg<DC>::smem_bytes(DC + p.d_r), p, w, row_blocks, stream,
                 attr_v4, "split kernel (v4) launch");
}

template <int DC>
void launch_split_v6(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  static bool attr_set = false;
  launch_wgmma(decode_split_v6_kernel<DC>, V6Cfg<DC>::smem_bytes(DC + p.d_r), p, w, row_blocks, stream, attr_set,
               "split kernel (v6) launch");
}
template <int DC>
void launch_split_v7(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream) {
  static bool attr_set = false;
  launch_wgmma(decode_split_v7_kernel<DC>, V7Cfg<DC>::smem_bytes(DC + p.d_r), p, w, row_blocks, stream, attr_set,
               "split kernel (v7) launch");
}

template <int DC>
void launch_for_dc(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  const quant::DecodeTileConfig cfg = quant::decode_tile_config_for(p);
  // Must agree with quant::decode_tile_config_for (rows, tile tokens, CTAs per SM).
  if (cfg.rows_per_block == 16) {
    if (p.variant == 2)
      launch_split<DC, 1, 4, 32, 2, 2>(p, w, cfg.row_blocks, stream);  // v2: 4 warps, 2 CTAs/SM
    else
      if (DC == 512 && p.variant == 4)
        launch_split_v3<512, 5, 1>(p, w, stream);  // v3a: 1 CTA/SM, 5-stage ring (comparison only)
      else
        launch_split_v3<DC, kV3Stages, 2>(p, w, stream);  // v3b: 2 CTAs/SM, 2-stage ring each
  } else {
    if constexpr (DC >= 128) {
      if constexpr (DC <= 256) {
        if (quant::decode_uses_v7(p)) {
          launch_split_v7<DC>(p, w, cfg.row_blocks, stream);  // wgmma, 128-row blocks (TPLA slices)
          return;
        }
      }
      if (quant::decode_uses_v6(p)) {
        launch_split_v6<DC>(p, w, cfg.row_blocks, stream);  // wgmma, 64-token tiles (the default)
        return;
      }
      if (use_wgmma(p)) {
        launch_split_v4<DC>(p, w, cfg.row_blocks, stream);  // wgmma: 2 warpgroups + TMA producer
        return;
      }
    }
    launch_split<DC, 4, 2, 32, 3, 1>(p, w, cfg.row_blocks, stream);  // v3 mma.sync: 8 warps, 64 rows, 1 CTA/SM
  }
}

}  // namespace

namespace {
int sm_count() {
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
  return sms;
}
}  // namespace
int decode_parts_for_device(const Bf16DecodeParams& p) { return quant::decode_default_parts(sm_count(), p); }

size_t decode_workspace_bytes_for(const Bf16DecodeParams& p) {
  const int parts = p.num_parts > 0 ? p.num_parts : decode_parts_for_device(p);
  return quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts);
}

void decode_v3_diagnostics(bool reset, unsigned long long out[4]) {
  if (reset) {
    const unsigned long long zero[4] = {0, 0, 0, 0};
    check_cuda(cudaMemcpyToSymbol(g_v3_diag, zero, sizeof zero), "diag reset");
  } else {
    check_cuda(cudaMemcpyFromSymbol(out, g_v3_diag, 4 * sizeof(unsigned long long)), "diag read");
  }
}

void decode_schedule_on_device(const int32_t* seqlens, int batch, int tile, int num_parts, int32_t* info,
                               int32_t* offsets, cudaStream_t stream) {
  decode_schedule_kernel<<<1, kSchedThreads, 0, stream>>>(seqlens, batch, tile, num_parts, info, offsets, nullptr,
                                                           CUtensorMap{}, nullptr);
  check_cuda(cudaGetLastError(), "schedule launch");
}

void mla_decode_bf16(const Bf16DecodeParams& p_in, cudaStream_t stream) {
  quant::validate_decode_params(p_in);
  if (p_in.variant < 0 || p_in.variant > 9)
    throw InputError("mla decode params: variant = " + std::to_string(p_in.variant) + " (supported: 0..9)");
  Bf16DecodeParams p = p_in;
  if (p.num_parts == 0) p.num_parts = decode_parts_for_device(p);
  const size_t need = quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, p.num_parts);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("mla decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) +
                     " (need " + std::to_string(need) + " for this shape; see decode_workspace_bytes_for)");
  const Workspace w = carve(p);
  const quant::DecodeTileConfig cfg = quant::decode_tile_config_for(p);
  if (p.variant == 1 || p.variant == 2)
    decode_schedule_legacy_kernel<<<1, 32, 0, stream>>>(p.seqlens, p.batch, cfg.tile_tokens, p.num_parts, w.info,
                                                         w.offsets);
  else if (use_wgmma(p) || quant::decode_uses_v6(p))  // the scheduler also writes the TMA descriptor
    decode_schedule_kernel<<<1, kSchedThreads, 0, stream>>>(p.seqlens, p.batch, cfg.tile_tokens, p.num_parts, w.info,
                                                             w.offsets, w.counts, make_kv_map(p, cfg.tile_tokens), w.map);
  else
    decode_schedule_kernel<<<1, kSchedThreads, 0, stream>>>(p.seqlens, p.batch, cfg.tile_tokens, p.num_parts, w.info,
                                                             w.offsets, w.counts, CUtensorMap{}, nullptr);
  check_cuda(cudaGetLastError(), "schedule launch");
  switch (p.d_c) {
    case 32: launch_for_dc<32>(p, w, stream); break;
    case 64: launch_for_dc<64>(p, w, stream); break;
    case 128: launch_for_dc<128>(p, w, stream); break;
    case 256: launch_for_dc<256>(p, w, stream); break;
    case 512: launch_for_dc<512>(p, w, stream); break;
    default: throw InputError("mla decode params: d_c = " + std::to_string(p.d_c));
  }
  check_cuda(cudaGetLastError(), "split kernel launch");
  if (fused_combine(p)) return;
  launch(decode_combine_kernel, dim3(p.batch, p.s_q * p.heads), dim3(64), 0, stream, use_pdl(p), "combine launch", p,
         static_cast<const int32_t*>(w.offsets), static_cast<const float*>(w.o_acc),
         static_cast<const float*>(w.lse_acc));
}

}  // namespace mla::kernels
