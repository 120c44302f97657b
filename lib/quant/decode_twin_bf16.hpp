#pragma once
// BF16 paged absorbed-MLA decode: the parameter block shared by the CUDA kernel
// (kernels/mla_decode.hpp) and its CPU twin below, the split-KV scheduler both run, and the
// twin itself.
//
// What is computed (SPEC section 4, absorbed form), per request b, query token t < s_q, head h:
//   s[j]  = scale * (q[b,t,h,:d_c] . x_j + q[b,t,h,d_c:] . k_pe_j)     j < L_b - (s_q - 1 - t)
//   out[b,t,h,:] = softmax_j(s) @ x          (x_j = cache row of token j, first d_c values)
//   lse[b,t,h]   = log(sum_j exp(s[j]))      natural log
// Causal rule for s_q = 2 (multi-token prediction): the last query token sees all L_b keys,
// the one before it sees L_b - 1. A row that sees no key gets out = 0 and lse = -inf.
//
// Numerics (the twin follows the kernel's rounding points, not its summation order):
//   bf16 inputs; Q.K in fp32; logits scaled into base 2 (s * log2 e) for exp2; online softmax
//   per tile of kTile tokens (running max m, running sum l of fp32 p); P rounded to bf16
//   before P.V; P.V accumulated in fp32; each split writes o/l (fp32) and its natural-log LSE;
//   the combine merges splits by LSE in fp32; the final output is rounded to bf16 once.
//
// Split-KV schedule: the work of request b is tiles(b) = max(1, ceil(L_b / tile)) tiles; each
// of num_parts parts (one CTA column on the GPU) takes a contiguous run of (request, tile)
// work of about equal cost, counting kFixedCost tiles extra for each request that starts in it
// (query load + epilogue). A request cut by a part boundary gets one split per part; splits
// are numbered in walk order, so request b's splits are split_offsets[b] .. split_offsets[b+1]-1.
// Closed form (prefix sums), computed in parallel on the GPU, one thread per request.
// The schedule depends only on seqlens, so it runs on the device (no host sync, graph
// capturable) and, identically, on the host for the twin.
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define MLA_HD __host__ __device__
#else
#define MLA_HD
#endif

namespace mla::quant {

// Plain parameter block. On the GPU every pointer is device memory; for the twin, host memory.
struct Bf16DecodeParams {
  const uint16_t* q = nullptr;          // [batch, s_q, heads, d_c + d_r] bf16 bits
  const uint16_t* kv_cache = nullptr;   // [num_pages, page_size, d_c + d_r] bf16 bits
  const int32_t* page_table = nullptr;  // [batch, max_pages] page ids; entries past a request unused
  const int32_t* seqlens = nullptr;     // [batch] cache length L_b (includes the s_q new tokens)
  uint16_t* out = nullptr;              // [batch, s_q, heads, d_c] bf16 bits
  float* lse = nullptr;                 // [batch, s_q, heads] natural log
  int batch = 0, s_q = 1, heads = 0, d_c = 0, d_r = 0;
  int num_pages = 0, page_size = 0, max_pages = 0;
  float scale = 0.f;                    // softmax scale applied to q.k
  int num_parts = 0;                    // split-KV parts; 0 = default (kernel: from SM count)
  // GPU only: scratch of decode_workspace_bytes(); error flag (optional, device int) set to a
  // non-zero code when a page id read from page_table is out of range (that tile is skipped).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int* error_flag = nullptr;
  // GPU only, for timing comparisons: 0 = the default path for the shape (decode_tile_config_for);
  // 7 = the mma.sync 64-row path for any shape of > 16 rows (32-token tiles; the twin follows).
  // Other values are rejected (decode_variant_supported). Every variant uses the twin's rounding
  // points with the tile of decode_tile_config_for.
  int variant = 0;
  // GPU only: the workspace already holds kernels::mla_decode_bf16_plan's schedule for these
  // seqlens, shape (batch, s_q, heads, d_c, d_r), variant and num_parts, so the decode launches
  // no scheduler (one plan per decode step serves every layer: the cache, query and outputs may
  // differ). The twin ignores it.
  bool planned = false;
};

// Sets the shape, paging and scale fields of a decode parameter block: Bf16DecodeParams, and
// Fp8DecodeParams (quant/fp8_decode_twin.hpp), which names them alike. Pointers and the split
// fields stay the caller's.
template <typename Params>
void set_decode_shape(Params& p, int batch, int s_q, int heads, int d_c, int d_r, int num_pages, int page_size,
                      int max_pages, float scale) {
  p.batch = batch;
  p.s_q = s_q;
  p.heads = heads;
  p.d_c = d_c;
  p.d_r = d_r;
  p.num_pages = num_pages;
  p.page_size = page_size;
  p.max_pages = max_pages;
  p.scale = scale;
}

// Tile shape used for a given number of query rows (s_q * heads): <= 16 rows take one 16-row
// block with 32-token tiles, two CTAs per SM (the memory-bound path: in each, a producer warp
// streams tiles with bulk copies into a 2-stage mbarrier ring; two CTAs give 8 consumer warps
// per SM, which the math per tile needs); more rows take 64-row blocks with 32-token tiles, one
// CTA per SM (the mma.sync path; decode_tile_config_for changes this for the wgmma paths).
struct DecodeTileConfig {
  int rows_per_block;
  int tile_tokens;
  int row_blocks;
  int ctas_per_sm;
  // The running max moves only when a tile's max exceeds it by more than this (log2 units; 0:
  // every tile's larger max is taken). With slack, p = exp2(x - m) stays <= 2^slack and most
  // tiles keep alpha = 1 exactly, so O is not rescaled (the wgmma paths: kDecodeMaxSlack).
  float max_slack = 0.f;
};
// The wgmma paths' running-max slack (log2 units): p <= 256, exact in bf16's exponent range; O,
// l and the LSE are the same quantities with a different, still exact, reference max.
constexpr float kDecodeMaxSlack = 8.f;
MLA_HD inline DecodeTileConfig decode_tile_config(int s_q, int heads) {
  const int rows = s_q * heads;
  if (rows <= 16) return {16, 32, 1, 2};
  return {64, 32, (rows + 63) / 64, 1};
}

// Variants mla_decode_bf16 accepts (Bf16DecodeParams::variant), and their list for messages.
MLA_HD inline bool decode_variant_supported(int variant) { return variant == 0 || variant == 7; }
constexpr const char* kDecodeVariantsHelp = "0 = default, 7 = mma.sync 64-row path";

// Whether the GPU runs p on a wgmma path (kernels/decode_manyhead_v6.cu, and v7 within it), whose
// tiles are 64 tokens: more than 16 rows, d_c >= 128, d_c + d_r <= 576 (the shared-memory
// budget), and not variant 7 (the mma.sync path, 32-token tiles).
MLA_HD inline bool decode_uses_v6(const Bf16DecodeParams& p) {
  return p.s_q * p.heads > 16 && p.d_c >= 128 && p.d_c + p.d_r <= 576 && p.variant != 7;
}
// Within the v6 path: more than 64 rows at d_c <= 256 (TPLA slices) run v7, 128-row blocks whose
// two warpgroups each own 64 rows and the whole d_c (one K tile feeds 128 rows).
MLA_HD inline bool decode_uses_v7(const Bf16DecodeParams& p) {
  return decode_uses_v6(p) && p.d_c <= 256 && p.d_c + p.d_r <= 320 && p.s_q * p.heads > 64;  // 320: smem
}
// The tile configuration the GPU and the twin use for p: decode_tile_config, with 64-token tiles
// and the running-max slack on the v6 path and 128-row blocks on v7.
MLA_HD inline DecodeTileConfig decode_tile_config_for(const Bf16DecodeParams& p) {
  DecodeTileConfig c = decode_tile_config(p.s_q, p.heads);
  if (decode_uses_v6(p)) {
    c.tile_tokens = 64;
    c.max_slack = kDecodeMaxSlack;
  }
  if (decode_uses_v7(p)) {
    c.rows_per_block = 128;
    c.row_blocks = (p.s_q * p.heads + 127) / 128;
  }
  return c;
}

// Cost (in tiles) charged per (part, request) segment for query load and epilogue.
constexpr int kFixedCost = 4;
// Ints per part in the schedule: begin_b, begin_tile, end_b, end_tile (exclusive), first_split.
constexpr int kPartInfoInts = 5;

MLA_HD inline int decode_tiles(int seqlen, int tile) {
  const int t = (seqlen + tile - 1) / tile;
  return t > 0 ? t : 1;
}

// Split-KV schedule (v3: closed form, so the GPU computes it with one thread per request).
// Lay the requests on a line of cost units: request b occupies [S_b, S_b + F + n_b) with its
// fixed cost F first and its n_b tiles after it (tile k at position S_b + F + k), S_b the
// exclusive prefix sum of F + n_b. Part p takes the tiles whose position lies in
// [p P, (p + 1) P), P = ceil(S_batch / num_parts). So a part does at most P tiles; a request
// is split where a part boundary falls inside its tiles. Splits are numbered by request, then
// part (= the walk order: part, then request). The same per-request functions run on the
// host (loops below) and on the GPU (kernels/decode_schedule.cu, one thread per request).
struct DecodeScheduleDims {
  long long per_part;  // P
  int num_parts;
};
MLA_HD inline long long decode_tile_pos(long long s_b, int k) { return s_b + kFixedCost + k; }
// Parts holding request b's first and last tile: its split count is last - first + 1.
MLA_HD inline int decode_first_part(long long s_b, long long per_part) {
  return static_cast<int>(decode_tile_pos(s_b, 0) / per_part);
}
MLA_HD inline int decode_last_part(long long s_b, int n_b, long long per_part) {
  return static_cast<int>(decode_tile_pos(s_b, n_b - 1) / per_part);
}
// Writes the begin (b, t) and first split of every part that starts inside request b's cost
// interval [s_b, s_b + F + n_b), and the end of the part before each (= its begin). off_b: the
// request's first split. The caller handles parts past the last request (write_tail_parts).
MLA_HD inline void decode_write_parts_of_request(int b, long long s_b, int n_b, int off_b,
                                                 long long per_part, int num_parts,
                                                 int32_t* part_info) {
  const long long s_next = s_b + kFixedCost + n_b;
  const int f_b = decode_first_part(s_b, per_part);
  long long p0 = (s_b + per_part - 1) / per_part;       // first p with p P >= s_b
  const long long p1 = (s_next + per_part - 1) / per_part;  // first p with p P >= s_next
  for (long long pl = p0; pl < p1 && pl < num_parts; ++pl) {
    const int p = static_cast<int>(pl);
    const long long into = pl * per_part - s_b - kFixedCost;
    const int t = into > 0 ? static_cast<int>(into) : 0;  // t < n_b since p P < s_next
    const int first = off_b + (t > 0 ? static_cast<int>(decode_tile_pos(s_b, t - 1) / per_part) - f_b + 1 : 0);
    int32_t* info = part_info + p * kPartInfoInts;
    info[0] = b;
    info[1] = t;
    info[4] = first;
    if (p > 0) {
      info[-kPartInfoInts + 2] = b;
      info[-kPartInfoInts + 3] = t;
    }
  }
}
// Parts p >= first_empty (p P >= total cost) are empty; the last part ends at (batch, 0).
MLA_HD inline void decode_write_tail_part(int p, int batch, int total_splits, int32_t* part_info) {
  int32_t* info = part_info + p * kPartInfoInts;
  info[0] = batch;
  info[1] = 0;
  info[4] = total_splits;
  if (p > 0) {
    info[-kPartInfoInts + 2] = batch;
    info[-kPartInfoInts + 3] = 0;
  }
}

// The schedule on one thread (the twin; the GPU's fallback for very large batches).
// part_info: [num_parts * kPartInfoInts], split_offsets: [batch + 1]. A part with no work has
// begin == end. A part's end (batch, 0) means "through the last request".
MLA_HD inline void compute_decode_schedule(const int32_t* seqlens, int batch, int tile,
                                           int num_parts, int32_t* part_info,
                                           int32_t* split_offsets) {
  long long total = 0;
  for (int b = 0; b < batch; ++b) total += decode_tiles(seqlens[b], tile) + kFixedCost;
  const long long per_part = (total + num_parts - 1) / num_parts;
  long long s_b = 0;
  int off = 0;
  for (int b = 0; b < batch; ++b) {
    const int n_b = decode_tiles(seqlens[b], tile);
    split_offsets[b] = off;
    decode_write_parts_of_request(b, s_b, n_b, off, per_part, num_parts, part_info);
    off += decode_last_part(s_b, n_b, per_part) - decode_first_part(s_b, per_part) + 1;
    s_b += kFixedCost + n_b;
  }
  split_offsets[batch] = off;
  const long long first_empty = (total + per_part - 1) / per_part;
  for (long long p = first_empty; p < num_parts; ++p) decode_write_tail_part(static_cast<int>(p), batch, off, part_info);
  int32_t* last = part_info + (num_parts - 1) * kPartInfoInts;
  last[2] = batch;
  last[3] = 0;
}


// Split-KV parts for `slots` CTAs that run at once (a part per CTA) and `batch` requests. A
// part boundary inside a request splits it: the split kernel writes fp32 partials and starts one
// more segment, and the combine merges them. With every slot a part, a batch a little below the
// slot count (B = 128 on 132 SMs) has nearly every request cut in two. So when a multiple of the
// batch keeps at least 90% of the slots busy, that many parts: requests of equal length are then
// never cut by a boundary. On an H100 (docs/gpu-notes.md, "Split parts a multiple of the batch")
// this took 2-10% off the FP8 decode, the memory-bound BF16 path and the TPLA slices at B = 128.
// A batch of up to twice the slots takes batch / 2 parts (two whole requests each) under the same
// 90% rule: at B = 128 on the many-head path's 66 slots nearly every request was cut, and merging
// the ~67 MB of fp32 partials cost 16-18 us a call. On an H200 (H = 128, docs/gpu-notes.md,
// session 14) 64 parts took 13 / 11 us off a 272 / 482 us call at 4K / 8K and added 12 us to a
// 1778 us one at 32K. Larger batches keep every slot (four requests a part already cut few).
inline int decode_balanced_parts(int slots, int batch) {
  if (slots < 1) return 1;
  if (batch < 1) return slots;
  if (batch > slots) {
    const int half = batch / 2;
    return batch % 2 == 0 && half <= slots && 10LL * half >= 9LL * slots ? half : slots;
  }
  const int parts = slots / batch * batch;
  return 10LL * parts >= 9LL * slots ? parts : slots;
}

// Default number of parts for p on a device with sm_count multiprocessors: CTAs per SM times
// SMs, shared by the row blocks of p's path (decode_tile_config_for: v7 has fewer, larger ones),
// fitted to the batch by decode_balanced_parts.
inline int decode_default_parts(int sm_count, const Bf16DecodeParams& p) {
  const DecodeTileConfig c = decode_tile_config_for(p);
  const int slots = sm_count * c.ctas_per_sm / c.row_blocks;
  return decode_balanced_parts(slots > 0 ? slots : 1, p.batch);
}

// Upper bound on splits: each of the num_parts - 1 part boundaries cuts at most one request.
inline int decode_max_splits(int batch, int num_parts) { return batch + num_parts; }

// The GPU workspace: byte offsets of the schedule (part info at 0, split offsets), the fused
// merge's ticket counters (int32 [batch, decode_merge_row_blocks]: zeroed by the scheduler, each
// put back to zero by the CTA that merges), the splits' fp32 LSEs [splits, rows] and partial
// outputs [splits, rows, d_c].
struct DecodeWorkspaceLayout {
  size_t info, offsets, cnt, lse, o, total;
};
// Row blocks a request's merge counters cover: 64-row blocks (the v6 path's, which merges in its
// split kernel; the other paths launch the combine and leave them unused).
inline int decode_merge_row_blocks(int s_q, int heads) { return (s_q * heads + 63) / 64; }
DecodeWorkspaceLayout decode_workspace_layout(int batch, int s_q, int heads, int d_c, int num_parts);
// Bytes of GPU scratch (decode_workspace_layout(...).total).
size_t decode_workspace_bytes(int batch, int s_q, int heads, int d_c, int num_parts);

// Throws mla::InputError naming the field and its value for any unsupported or inconsistent
// shape, null pointer, or scale. Pointers are not dereferenced (they may be device memory).
void validate_decode_params(const Bf16DecodeParams& p);

// The CPU twin: same signature as the kernel's host function, on host buffers. Uses
// p.num_parts (0: decode_default_parts(132, p), an H100/H200's SM count) so its split
// points equal the kernel's for the same num_parts. Throws InputError on bad params and on
// an out-of-range page id that a request needs.
void decode_twin_bf16(const Bf16DecodeParams& p);

// CPU twin of the cache-append kernel: writes kv_new [batch, n_new, d_c + d_r] into the pages
// of positions positions[b] .. positions[b] + n_new - 1. Throws InputError on a page id out of
// range or a position past max_pages * page_size.
void cache_append_twin_bf16(const uint16_t* kv_new, int batch, int n_new, int dim,
                            const int32_t* positions, const int32_t* page_table, int max_pages,
                            uint16_t* kv_cache, int num_pages, int page_size);

}  // namespace mla::quant
