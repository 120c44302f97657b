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
// work of about equal cost, counting kFixedCost tiles extra for each request it touches
// (query load + epilogue). A request cut by a part boundary gets one split per part; splits
// are numbered in walk order, so request b's splits are split_offsets[b] .. split_offsets[b+1]-1.
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
};

// Tile shape used for a given number of query rows (s_q * heads): <= 16 rows take one 16-row
// block with 32-token tiles and two CTAs per SM (memory-bound shapes: two CTAs keep twice the
// bytes in flight and overlap one CTA's math with the other's loads); more rows take 64-row
// blocks with 32-token tiles, one CTA per SM (compute-bound shapes; the Q block then fills
// shared memory).
struct DecodeTileConfig {
  int rows_per_block;
  int tile_tokens;
  int row_blocks;
  int ctas_per_sm;
};
MLA_HD inline DecodeTileConfig decode_tile_config(int s_q, int heads) {
  const int rows = s_q * heads;
  if (rows <= 16) return {16, 32, 1, 2};
  return {64, 32, (rows + 63) / 64, 1};
}

// Cost (in tiles) charged per (part, request) segment for query load and epilogue.
constexpr int kFixedCost = 4;
// Ints per part in the schedule: begin_b, begin_tile, end_b, end_tile (exclusive), first_split.
constexpr int kPartInfoInts = 5;

MLA_HD inline int decode_tiles(int seqlen, int tile) {
  const int t = (seqlen + tile - 1) / tile;
  return t > 0 ? t : 1;
}

// Serial scheduler (one GPU thread or the host). part_info: [num_parts * kPartInfoInts],
// split_offsets: [batch + 1]. A part with no work has begin == end.
MLA_HD inline void compute_decode_schedule(const int32_t* seqlens, int batch, int tile,
                                           int num_parts, int32_t* part_info,
                                           int32_t* split_offsets) {
  long long total = 0;
  for (int b = 0; b < batch; ++b) {
    total += decode_tiles(seqlens[b], tile) + kFixedCost;
    split_offsets[b] = 0;
  }
  split_offsets[batch] = 0;
  // Each part boundary that cuts a request costs one more kFixedCost: budget for it, so the
  // last part (which takes whatever is left) is not overloaded.
  total += static_cast<long long>(num_parts) * kFixedCost;
  long long per_part = (total + num_parts - 1) / num_parts;
  if (per_part < kFixedCost + 1) per_part = kFixedCost + 1;
  int b = 0, t = 0, split = 0;
  for (int p = 0; p < num_parts; ++p) {
    int32_t* info = part_info + p * kPartInfoInts;
    info[0] = b;
    info[1] = t;
    info[4] = split;
    int end_b = b, end_t = t;
    const bool last = (p == num_parts - 1);
    long long budget = per_part;
    while (b < batch && (last || budget > kFixedCost)) {
      const int n_tiles = decode_tiles(seqlens[b], tile);
      int take = n_tiles - t;
      if (!last && budget - kFixedCost < take) take = static_cast<int>(budget - kFixedCost);
      split_offsets[b] += 1;  // count now, prefix-sum below
      ++split;
      budget -= take + kFixedCost;
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

// Default number of parts for a device with sm_count multiprocessors (one CTA per SM).
inline int decode_default_parts(int sm_count, int s_q, int heads) {
  const DecodeTileConfig c = decode_tile_config(s_q, heads);
  const int parts = sm_count * c.ctas_per_sm / c.row_blocks;
  return parts > 0 ? parts : 1;
}

// Upper bound on splits: each of the num_parts - 1 part boundaries cuts at most one request.
inline int decode_max_splits(int batch, int num_parts) { return batch + num_parts; }

// Bytes of GPU scratch: schedule + fp32 partial outputs and LSEs of every split.
size_t decode_workspace_bytes(int batch, int s_q, int heads, int d_c, int num_parts);

// Throws mla::InputError naming the field and its value for any unsupported or inconsistent
// shape, null pointer, or scale. Pointers are not dereferenced (they may be device memory).
void validate_decode_params(const Bf16DecodeParams& p);

// The CPU twin: same signature as the kernel's host function, on host buffers. Uses
// p.num_parts (0: decode_default_parts(132, ...), an H100/H200's SM count) so its split
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
