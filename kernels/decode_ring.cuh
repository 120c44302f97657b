#pragma once
// The wgmma paths' K/V ring: a full/empty mbarrier ring in shared memory fed by one producer
// thread with TMA boxes (64 columns x BN tokens, 128-byte swizzle: the wgmma K-major layout)
// from the paged cache viewed as a 2-D tensor; the consumers' side (valid rows of a tile,
// zeroing rows past the request's length) and the Q block load into the same layout.
// A new cache format brings its own producer; the ring protocol stays.
#include "kernels/decode_device.cuh"
#include "quant/decode_twin_bf16.hpp"

namespace mla::kernels::detail {

// Threads of the wgmma kernels: 2 consumer warpgroups + 1 producer warpgroup (setmaxnreg).
constexpr int kWgmmaThreads = 384;
// Opt-in shared memory per block on sm_90 (227 KB).
constexpr size_t kMaxSmemPerBlock = 232448;

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
// ring; a tile with a bad page id is loaded from rows before the tensor's start, which the copy
// engine fills with zeros (zero keys and values), and flagged. So the consumers need no
// page-table read of their own: only the rows past L of a request's last tile need zeroing.
// map: the address of the kernel's __grid_constant__ descriptor parameter (detail::make_kv_map).
template <int BN, int S>
__device__ void produce_tiles(const quant::Bf16DecodeParams& p, const CUtensorMap* map, const int32_t* in,
                              uint32_t sK, uint32_t stage_bytes, int nblk, uint32_t bar0) {
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
      const int row = ok ? page * p.page_size + j0 % p.page_size : -BN;  // -BN: out of range, zero-filled
      mbar_arrive_expect_tx(bar0 + 8 * stage, stage_bytes);
      const uint32_t dst = sK + stage * stage_bytes;
      for (int kb = 0; kb < nblk; ++kb) tma_load_2d(dst + kb * BN * 128, map, kb * 64, row, bar0 + 8 * stage);
    }
  }
}
// Rows of tile ti (BN tokens) before the request's length L (<= 0: none); the rest of the tile
// may hold NaN from the page's unused tail and must be zeroed before P.V.
template <int BN>
__device__ __forceinline__ int tile_rows_in_length(int L, int ti) {
  return min(BN, L - ti * BN);
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
// (64-column blocks of 64 rows x 128 B), rows past `rows` as zeros, by cp.async from `threads`
// threads (thread index t), not waited for: the issuing threads complete it with
// cp_async_wait_all(), then fence_proxy_async() and a barrier, so a request's Q can be loaded under
// the previous request's last tile (v6). (A load-then-st.shared loop had waited a global round
// trip per 16-byte chunk: the asm store's memory clobber keeps the next load behind it.)
__device__ __forceinline__ void issue_q_rows(const quant::Bf16DecodeParams& p, int b, int rbase, uint32_t dst, int t,
                                             int threads) {
  const int dim = p.d_c + p.d_r, rows = p.s_q * p.heads, cpr = dim / 8;
  const bf16* qb = reinterpret_cast<const bf16*>(p.q) + static_cast<size_t>(b) * rows * dim;
  for (int c = t; c < 64 * cpr; c += threads) {
    const int r = c / cpr, k = c - r * cpr;
    const bool in = rbase + r < rows;
    cp_async_16(dst + (k >> 3) * 8192 + r * 128 + (((k & 7) ^ (r & 7)) << 4),
                in ? qb + static_cast<size_t>(rbase + r) * dim + k * 8 : qb, in);
  }
}
// The same, completed for this thread (the caller's barrier publishes it to the others).
__device__ __forceinline__ void load_q_rows(const quant::Bf16DecodeParams& p, int b, int rbase, uint32_t dst, int t,
                                            int threads) {
  issue_q_rows(p, b, rbase, dst, t, threads);
  cp_async_wait_all();
  fence_proxy_async();  // -> read by wgmma (async proxy)
}

}  // namespace mla::kernels::detail
