#pragma once
// FP8 paged absorbed-MLA decode (SnapMLA on Hopper): the parameter block shared by the CUDA
// kernel (kernels/fp8_decode.hpp) and its CPU twin below. The cache is the paged FP8 format of
// quant/fp8_cache_layout.hpp; the query is quantised per (token, head) row beforehand
// (fp8_quantize_query_twin / kernels' fp8_quantize_query).
//
// What is computed: the BF16 decode's function (quant/decode_twin_bf16.hpp: causal rule for
// s_q = 2, output [batch, s_q, heads, d_c] bf16, natural-log LSE) on the dequantised cache and
// query, with these rounding points (the GPU's, in the twin's order of additions):
//   acc_j  = sum_i q8_i x8_ji + sum_i q_rope_i k_rope_ji      fp32 (e4m3 and bf16 products exact)
//   x_j    = (acc_j * s_kj) * (s_q * scale * log2 e)          fp32, base-2 logit
//   per 64-token tile (one P block): m_new = max(m, max_j x_j), alpha = 2^(m - m_new),
//   p_j    = 2^(x_j - m_new);  sum_p = sum_j p_j              (masked tokens: p = 0)
//   P'_j   = p_j * s_kj                                        (s_k folded into P; masked: 0)
//   sigma' = max(max_j P'_j / 448, 2^-80) (unchanged when max_j P'_j is 0; fp8_block_scale);
//            inv = 1 / sigma'
//   P8_j   = E4M3(P'_j * inv)                                  (P re-quantised per block)
//   gamma  = alpha * (sigma * inv)                             (block scale folded into the
//   l      = l gamma + sum_p inv;  o_c = o_c gamma + sum_j P8_j x8_jc     online softmax)
//   so o and l are both in units of the current sigma; at the end out = o / l and
//   lse = (m + log2(sigma l)) ln 2. sigma starts at 1, m at -inf, o and l at 0.
// Split-KV: the BF16 decode's schedule with 64-token tiles; a request cut into several splits
// is merged by LSE in fp32 exactly as the BF16 combine does (one bf16 rounding at the end).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "quant/decode_twin_bf16.hpp"
#include "quant/fp8_cache_layout.hpp"

namespace mla::quant {

// Tokens per tile, = the P re-quantisation block of SnapMLA (BlockN = 64).
constexpr int kFp8DecodeTile = 64;
// Query rows per row block (one CTA on the GPU).
constexpr int kFp8DecodeRowsPerBlock = 64;

// The lower bound of a tile's P block scale sigma. o and l are kept in units of the current
// sigma; without a bound, a tile far colder than the row's maximum (largest P' ~ 2^-118 of it)
// makes sigma subnormal, 1 / sigma infinite and the row NaN (a hot token, then cold tiles in the
// same split: tests/quant/test_fp8_decode_twin.cpp VeryColdTilesAfterAHotOneStayFinite). With
// the bound, l = l_true / sigma <= 2^24 tokens * 2^80 and o alike stay far below 2^128 (l_true,
// the sum of p = 2^(x - m), is >= 1 once the maximum's tile is in). It binds only on a tile whose
// largest P' = p s_k is below 448 * 2^-80 = 2^-71.2, i.e. whose tokens are at least ~2^-60 below
// the row's maximum for any key scale s_k >= 2^-11 (latent amax >= 0.22): their P8 round to zero
// either way, and what they add to l is below fp32's resolution of l >= 2^80. So it changes no
// result that was finite before.
constexpr float kFp8SigmaFloor = 0x1p-80f;

// sigma' of a tile whose largest P' is amax (0 or NaN: no live token, the previous scale prev):
// the one formula of the twin and every FP8 kernel's softmax.
MLA_FP8_HD inline float fp8_block_scale(float amax, float prev) {
  return amax > 0.f ? fmaxf(amax / kFp8CacheMax, kFp8SigmaFloor) : prev;
}

struct Fp8DecodeParams {
  const uint8_t* q8 = nullptr;          // [batch, s_q, heads, d_c] e4m3
  const uint16_t* q_rope = nullptr;     // [batch, s_q, heads, d_r] bf16 bits (pre-divided by q_scale)
  const float* q_scale = nullptr;       // [batch, s_q, heads]
  const uint8_t* cache = nullptr;       // [num_pages, layout().page_bytes()]
  const int32_t* page_table = nullptr;  // [batch, max_pages]
  const int32_t* seqlens = nullptr;     // [batch]
  uint16_t* out = nullptr;              // [batch, s_q, heads, d_c] bf16 bits
  float* lse = nullptr;                 // [batch, s_q, heads]
  int batch = 0, s_q = 1, heads = 0, d_c = 0, d_r = 0;
  int num_pages = 0, page_size = 0, max_pages = 0;
  float scale = 0.f;                    // softmax scale
  int num_parts = 0;                    // 0 = default (GPU: SMs / row blocks; twin: 132 SMs)
  // GPU only: scratch (fp8_decode_workspace_bytes) and an optional device error flag set to 1
  // when a page id that a request needs is out of range (that tile is skipped).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int* error_flag = nullptr;
  // GPU only: the workspace already holds kernels::fp8_decode_plan's schedule for these seqlens,
  // batch, rows and num_parts (one plan per decode step serves every layer), so the decode
  // launches no scheduler. The twin ignores it.
  bool planned = false;

  MLA_FP8_HD Fp8CacheLayout layout() const { return Fp8CacheLayout{page_size, d_c, d_r}; }
};

// The latent and RoPE widths the GPU kernels are built for (the twin takes more): what
// kernels::fp8_decode_shape_supported checks, and what the CPU backends refuse so as to twin only
// what the GPU runs (lib/verify).
inline bool fp8_decode_gpu_d_c(int d_c) { return d_c == 128 || d_c == 256 || d_c == 512; }
inline bool fp8_decode_gpu_d_r(int d_r) { return d_r == 32 || d_r == 64; }

// The GPU's TPLA-slice kernel (d_c <= 256, more than one 64-row block) takes 128-row blocks:
// each of its warpgroups owns 64 rows and all d_c channels, so one tile feeds 128 rows.
inline bool fp8_decode_uses_pair(const Fp8DecodeParams& p) {
  return p.d_c <= 256 && p.s_q * p.heads > kFp8DecodeRowsPerBlock;
}
inline int fp8_decode_row_blocks(const Fp8DecodeParams& p) {
  const int per = fp8_decode_uses_pair(p) ? 2 * kFp8DecodeRowsPerBlock : kFp8DecodeRowsPerBlock;
  return (p.s_q * p.heads + per - 1) / per;
}
// Default split-KV parts on a device of sm_count SMs: one CTA per SM over all row blocks,
// fitted to the batch (decode_balanced_parts).
inline int fp8_decode_default_parts(int sm_count, const Fp8DecodeParams& p) {
  const int slots = sm_count / fp8_decode_row_blocks(p);
  return decode_balanced_parts(slots > 0 ? slots : 1, p.batch);
}

// Throws mla::InputError naming the field for an unsupported shape, null pointer or scale.
void validate_fp8_decode_params(const Fp8DecodeParams& p);
// The part of it that a split schedule and its workspace depend on (seqlens, batch, s_q, heads,
// d_c, d_r, num_parts): what kernels::fp8_decode_plan checks.
void validate_fp8_decode_schedule(const Fp8DecodeParams& p);

// The CPU twin (host buffers). Throws InputError on bad params and on an out-of-range page id
// that a request needs.
void fp8_decode_twin(const Fp8DecodeParams& p);

}  // namespace mla::quant
