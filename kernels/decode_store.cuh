#pragma once
// The end of a split, shared by every decode path: the row store (bf16 output when the request
// has one split, else fp32 partial + LSE into the workspace) and the LSE merge of a request's
// splits (the combine kernel's arithmetic).
#include "kernels/decode_device.cuh"
#include "quant/decode_twin_bf16.hpp"

namespace mla::kernels::detail {

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

// The LSE merge of a request's splits [s0, s1) (natural log, fp32), in two pieces so that the
// combine kernel (merge_splits_row) and the fused merges of v6 and the FP8 narrow kernel
// (merge_request, below) evaluate the same expressions in the same order. Partials are read
// through L2 (__ldcg): other CTAs wrote them. merge_row_lse: row r's merged LSE (-inf when every
// split's is -inf).
__device__ __forceinline__ float merge_row_lse(const float* lse_acc, int rows, int r, int s0, int s1) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float m = neg_inf;
  for (int s = s0; s < s1; ++s) m = fmaxf(m, __ldcg(lse_acc + static_cast<size_t>(s) * rows + r));
  if (m == neg_inf) return neg_inf;
  float sum = 0.f;
  for (int s = s0; s < s1; ++s) sum += expf(__ldcg(lse_acc + static_cast<size_t>(s) * rows + r) - m);
  return m + logf(sum);
}
// Split s's weighted columns added to o: o += exp(lse_s - lse) v_s.
__device__ __forceinline__ void merge_add(float4& o, float lse_s, float lse, float4 v) {
  const float w = expf(lse_s - lse);
  o.x += w * v.x;
  o.y += w * v.y;
  o.z += w * v.z;
  o.w += w * v.w;
}

// Merges splits [s0, s1) of request b, row r, with the 32 lanes t of a warp (DC / 128 float4
// column groups each; at DC < 128 only the first DC / 4 lanes hold columns) and writes
// the bf16 row and its LSE: the combine kernel's body. A split's groups are loaded together and
// the split loop is unrolled by two, so a lane has up to 2 DC / 128 loads in flight: with one
// group at a time (a runtime split loop inside the column loop) a row took ~10 dependent L2 / HBM
// round trips, and the combine ran 16-18 us at 256 rows where the partials' bytes take ~10
// (docs/gpu-notes.md, session 15). Per element the same expressions in the same order as before
// (merge_add, split by split), so the outputs are unchanged. The FP8 and 4-bit decodes reach it
// through the combine kernel with their BF16 parameter shim.
template <int DC>
__device__ __forceinline__ void merge_splits_row(const quant::Bf16DecodeParams& p, const float* o_acc, const float* lse_acc, int b, int r,
                                                 int s0, int s1, int t) {
  constexpr int kPer = DC >= 128 ? DC / 128 : 1;  // float4 groups per lane
  const int rows = p.s_q * p.heads;
  const float neg_inf = -__int_as_float(0x7f800000);
  const float lse = merge_row_lse(lse_acc, rows, r, s0, s1);
  if (t == 0) p.lse[static_cast<size_t>(b) * rows + r] = lse;
  if (t * 4 >= DC) return;
  float4 o[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) o[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lse != neg_inf) {
#pragma unroll 2
    for (int s = s0; s < s1; ++s) {
      const size_t at = static_cast<size_t>(s) * rows + r;
      const float lse_s = __ldcg(lse_acc + at);
      float4 v[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k) v[k] = __ldcg(reinterpret_cast<const float4*>(o_acc + at * DC + 4 * t + 128 * k));
#pragma unroll
      for (int k = 0; k < kPer; ++k) merge_add(o[k], lse_s, lse, v[k]);
    }
  }
  bf16* dst = reinterpret_cast<bf16*>(p.out) + (static_cast<size_t>(b) * rows + r) * DC + 4 * t;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    *reinterpret_cast<__nv_bfloat162*>(dst + 128 * k) = __floats2bfloat162_rn(o[k].x, o[k].y);
    *reinterpret_cast<__nv_bfloat162*>(dst + 128 * k + 2) = __floats2bfloat162_rn(o[k].z, o[k].w);
  }
}

// The combine fused into the split kernel (the combine kernel's arithmetic: the two pieces of
// merge_splits_row, the same expressions in the same order), in two steps; used by v6 (64-row
// blocks: a counter per request and row block) and the FP8 narrow kernel (one block).
// take_merge_ticket: after a split of request b (n_split > 1) is stored, the `threads` storing
// threads (named barrier bar) take a ticket from cnt[idx]; it returns true in the CTA that takes
// the last of the n_split tickets (that CTA puts the counter back to 0 for the next call; the
// scheduler's launch zeroes it first). The split's stores are made visible device-wide before the
// ticket (__threadfence); flag: a shared int.
__device__ __forceinline__ bool take_merge_ticket(int32_t* cnt, int idx, int n_split, int t, int threads, int bar,
                                                  volatile int* flag) {
  __threadfence();
  named_bar_sync(bar, threads);
  if (t == 0) {
    const bool last = atomicAdd(cnt + idx, 1) == n_split - 1;
    if (last) atomicExch(cnt + idx, 0);
    *flag = last;
  }
  named_bar_sync(bar, threads);
  return *flag != 0;
}
// merge_request: the CTA that took the last ticket merges rows [row0, row0 + R) (< rows) of
// request b with THREADS threads t: one thread per row computes its LSE (merge_row_lse) into
// sLse [R] (shared), then each thread accumulates its (row, 4-column) slots split by split, four
// slots' loads of a split in flight together (a row at a time, the merge took ~3 L2 round trips
// per row pair). Call it after the kernel's tile loop: in it, the merge's divergent loops made
// ptxas serialise every wgmma of the FP8 narrow kernel (C7520). bar: a named barrier of the
// THREADS threads. P: Bf16DecodeParams or the FP8 decode's parameter block. kChunk: slots whose
// loads are in flight together per split (4 in the FP8 narrow kernel, where more spilled; v6 at
// the end of its CTAs has its registers free and takes 16: with 4 the merge ran ~8 dependent
// rounds of cold loads and made the 256-row shapes 1.5% slower, docs/gpu-notes.md).
template <int DC, int R, int THREADS, int kChunk = 4, class P>
__device__ __forceinline__ void merge_request(const P& p, const float* o_acc, const float* lse_acc,
                                              const int32_t* offsets, int b, int rows, int row0, int t, float* sLse,
                                              int bar) {
  static_assert(THREADS >= R, "merge_request: a thread per row for the LSEs");
  constexpr int kGroups = DC / 4;  // float4 column groups of a row
  constexpr int kPer = (R * kGroups + THREADS - 1) / THREADS;
  const float neg_inf = -__int_as_float(0x7f800000);
  __threadfence();
  const int s0 = offsets[b], s1 = offsets[b + 1];
  if (t < R && row0 + t < rows) {
    const float lse = merge_row_lse(lse_acc, rows, row0 + t, s0, s1);
    sLse[t] = lse;
    p.lse[static_cast<size_t>(b) * rows + row0 + t] = lse;
  }
  named_bar_sync(bar, THREADS);
#pragma unroll 1
  for (int k0 = 0; k0 < kPer; k0 += kChunk) {
    float4 o[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) o[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = s0; s < s1; ++s) {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const int slot = t + (k0 + k) * THREADS, lr = slot / kGroups;
        if (lr >= R || row0 + lr >= rows) continue;
        const float lse = sLse[lr];
        if (lse == neg_inf) continue;
        const size_t at = static_cast<size_t>(s) * rows + row0 + lr;
        merge_add(o[k], __ldcg(lse_acc + at), lse,
                  __ldcg(reinterpret_cast<const float4*>(o_acc + at * DC + 4 * (slot % kGroups))));
      }
    }
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int slot = t + (k0 + k) * THREADS, lr = slot / kGroups;
      if (lr >= R || row0 + lr >= rows) continue;
      bf16* dst = reinterpret_cast<bf16*>(p.out) + (static_cast<size_t>(b) * rows + row0 + lr) * DC + 4 * (slot % kGroups);
      *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(o[k].x, o[k].y);
      *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(o[k].z, o[k].w);
    }
  }
  named_bar_sync(bar, THREADS);  // sLse is free again
}

}  // namespace mla::kernels::detail
