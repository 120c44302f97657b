#pragma once
// Shared-prefix (TyphoonMLA) decode in BF16: the parameter blocks shared by the CUDA kernels
// (kernels/prefix_attention.hpp) and their CPU twins below.
//
// Three steps (SPEC sections 4 and 6):
//  1. Decompress (once, when a prefix is registered): from the prefix's latent cache rows
//     [x_j | k_pe_j] and kv_b_proj (bf16, [H*(d_n+d_v), d_c], gamma already absorbed):
//       K[j,h] = [W_UK[h] x_j ; k_pe_j]  (d_n + d_r),   V[j,h] = W_UV[h] x_j  (d_v)
//     products in fp32, rounded once to bf16; k_pe copied.
//  2. Naive prefix attention: every query row (request b, query token t: row = b*s_q + t) and head
//     h attends to all L_s prefix tokens (non-causal: the prefix precedes every query):
//       s[j] = scale * (q[row,h] . K[j,h]),   o = softmax(s) @ V[:,h],   lse = ln sum_j e^s[j]
//     The prefix is cut into `splits` contiguous runs of 64-token tiles; each run writes its
//     normalised fp32 partial output and natural-log LSE (the merge combines them).
//     Rounding points as the absorbed kernel (quant/decode_twin_bf16.hpp): fp32 Q.K, exp2 of
//     logits scaled by log2 e, online softmax per 64-token tile, P rounded to bf16 before P.V,
//     fp32 accumulation, row sum of the unrounded fp32 P.
//  3. Merge: the absorbed kernel's suffix output o_lat (bf16, latent space [rows, H, d_c]) is
//     expanded with W_UV *before* the merge (o_A = W_UV[h] o_lat in fp32), then the prefix splits
//     and o_A are merged by their natural-log LSEs in fp32:
//       l = ln(sum_i e^{l_i}),  o = sum_i e^{l_i - l} o_i
//     and o is rounded to bf16 once. A side with no key (empty suffix: lse = -inf) has weight 0.
//     The merge is thus in the model's d_v space (the prefix's V is decompressed); with no prefix
//     splits it is the W_UV expansion of absorb-only decode.
// Mixed decode = 2 + the absorbed kernel on each request's own pages + 3; below the batch
// threshold B_theta (model/prefix_cost.hpp) it falls back to the absorbed kernel over the whole
// cache (prefix pages + own pages) and the merge step with no prefix splits.
#include <cstddef>
#include <cstdint>

#include "quant/decode_twin_bf16.hpp"

namespace mla::quant {

constexpr int kPrefixTile = 64;  // prefix tokens per tile (kernel and twin)

struct PrefixDecompressParams {
  const uint16_t* kv_cache = nullptr;   // [num_pages, page_size, d_c + d_r] latent rows
  const int32_t* page_table = nullptr;  // [max_pages] the prefix's pages, in order
  const uint16_t* kv_b = nullptr;       // [heads * (d_n + d_v), d_c] bf16 (kv_b_proj)
  uint16_t* k = nullptr;                // [prefix_len, heads, d_n + d_r]
  uint16_t* v = nullptr;                // [prefix_len, heads, d_v]
  int prefix_len = 0, num_pages = 0, page_size = 0, max_pages = 0;
  int heads = 0, d_c = 0, d_r = 0, d_n = 0, d_v = 0;
};

struct PrefixAttnParams {
  const uint16_t* q = nullptr;  // [rows, heads, d_n + d_r] naive queries ([q_nope | roped q_pe])
  const uint16_t* k = nullptr;  // [prefix_len, heads, d_n + d_r]
  const uint16_t* v = nullptr;  // [prefix_len, heads, d_v]
  float* part_o = nullptr;      // [splits, rows, heads, d_v] normalised partial outputs
  float* part_lse = nullptr;    // [splits, rows, heads] natural log (-inf: no key in the run)
  int rows = 0, heads = 0, d_n = 0, d_r = 0, d_v = 0, prefix_len = 0, splits = 1;
  float scale = 0.f;
};

struct PrefixMergeParams {
  const uint16_t* o_lat = nullptr;     // [rows, heads, d_c] absorbed output (bf16)
  const float* lse_lat = nullptr;      // [rows, heads]
  const uint16_t* kv_b = nullptr;      // [heads * (d_n + d_v), d_c]: W_UV[h] = rows h*(d_n+d_v)+d_n ..
  const float* part_o = nullptr;       // prefix splits (PrefixAttnParams); unused when splits = 0
  const float* part_lse = nullptr;
  uint16_t* out = nullptr;             // [rows, heads, d_v] bf16
  float* lse = nullptr;                // [rows, heads] natural log
  int rows = 0, heads = 0, d_c = 0, d_n = 0, d_v = 0, splits = 0;
};

// One decode step of B requests sharing a decompressed prefix.
struct MixedDecodeParams {
  // Absorbed decode of each request's own tokens: q = absorbed queries [B, s_q, H, d_c + d_r],
  // kv_cache/page_table/seqlens = the request's own pages (its first own token at slot 0 of its
  // first own page, so a prefix may end mid-page), out/lse = scratch [B, s_q, H, d_c] / [B, s_q, H].
  // seqlens include the s_q new tokens; the causal rule of s_q = 2 applies to them.
  Bf16DecodeParams suffix;
  // Fallback below B_theta: the same queries over the whole cache (prefix pages followed by own
  // pages in one table, seqlens = L_s + own), same out/lse scratch. Unused above B_theta.
  Bf16DecodeParams full;
  const uint16_t* q_naive = nullptr;   // [B, s_q, H, d_n + d_r]
  const uint16_t* prefix_k = nullptr;  // decompressed prefix (PrefixDecompressParams)
  const uint16_t* prefix_v = nullptr;
  int prefix_len = 0;
  const uint16_t* kv_b = nullptr;      // [H * (d_n + d_v), d_c]
  int d_n = 0, d_v = 0;
  uint16_t* out = nullptr;             // [B, s_q, H, d_v] bf16
  float* lse = nullptr;                // [B, s_q, H] natural log
  double b_theta = 0.0;                // naive prefix when batch >= b_theta, else absorb only
  int prefix_splits = 0;               // 0: prefix_default_splits
  // GPU: prefix partials, prefix_workspace_bytes(); twin: ignored.
  void* prefix_workspace = nullptr;
  size_t prefix_workspace_bytes = 0;
};

inline bool mixed_uses_prefix(const MixedDecodeParams& p) { return double(p.suffix.batch) >= p.b_theta; }

// Query rows per CTA of the prefix kernel (8 warps of 16 rows).
constexpr int kPrefixRowsPerBlock = 128;

// Splits of the prefix for `rows` query rows and `heads` heads on sm_count SMs: the fewest runs
// that fill the SMs to >= 90% of full waves (at most 16, at most one tile per run).
int prefix_default_splits(int rows, int heads, int prefix_len, int sm_count);

// Bytes of the prefix partials for this many splits.
size_t prefix_workspace_bytes(int rows, int heads, int d_v, int splits);

// Host checks (mla::InputError naming the field and value); pointers are not dereferenced.
void validate_prefix_decompress(const PrefixDecompressParams& p);
void validate_prefix_attn(const PrefixAttnParams& p);
void validate_prefix_merge(const PrefixMergeParams& p);
void validate_mixed_decode(const MixedDecodeParams& p);

// CPU twins (host buffers).
void prefix_decompress_twin_bf16(const PrefixDecompressParams& p);
void prefix_attn_twin_bf16(const PrefixAttnParams& p);
void prefix_merge_twin_bf16(const PrefixMergeParams& p);
// The whole step: prefix attention (or the fallback), the absorbed twin, the merge. The twin
// uses p.prefix_splits (0: prefix_default_splits(.., 132)), so its split points equal the GPU's.
void mixed_decode_twin_bf16(const MixedDecodeParams& p);

}  // namespace mla::quant
