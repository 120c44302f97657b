#pragma once
// The paged FP8 latent cache (SPEC section 4, RoPE-aware per-token; docs/formats/kv-fp8.md has
// the byte diagram): its page layout, the per-token encoding shared by the append kernel
// (kernels/fp8_append.cu) and its CPU twin, the per-(token, head) query quantisation, and
// FlashMLA's 656-byte V3.2 layout as an input format.
//
// One page of P tokens (P = page_size), d_c latent channels, d_r RoPE channels:
//   [latent section: P * d_c bytes][rope section: P * 2 d_r bytes][scales: P fp32]
// = P * (d_c + 2 d_r + 4) bytes (644 B per token at d_c = 512, d_r = 64).
// Each section is stored as column blocks of W = min(128, row bytes) bytes: block kb holds the
// bytes [kb W, kb W + W) of every token's row, token-major (token t at t W), so a 64-token
// tile of one block is one contiguous run of 64 W bytes: one bulk copy. Inside a block the
// 16-byte chunks are permuted as the Hopper shared-memory swizzle of that width permutes them
// (byte address a -> a ^ (((a >> 7) & (W / 16 - 1)) << 4), CuTe's Swizzle<log2(W/16), 4, 3>):
// a linear copy into shared memory at a 1024-byte aligned address is then the layout wgmma
// reads with the W-byte swizzle mode (no TMA descriptor, no register shuffles).
//
// Encoding of one token (fp32 arithmetic, inputs bf16 or fp32 widened to fp32):
//   amax = max_i |x_i|; s = max(amax, kFp8MinAmax) / 448
//   x8_i = E4M3(x_i / s)  (round to nearest even, saturating);  kpe_i = BF16(k_pe_i / s) (RNE)
// A token with a non-finite value (in x or k_pe) is stored poisoned: scale = NaN, all other
// bytes zero. Its logits become NaN (as the float64 reference's would) while rows that do not
// see it stay finite: zero latent bytes cannot turn a masked 0 weight into NaN.
// Queries are quantised per (token, head) row with the same rule (q_c -> q8, q_pe -> q_pe / s_q).
#include <cstddef>
#include <cstdint>

#include "quant/fp8_cache_layout.hpp"

namespace mla::quant {

// Throws mla::InputError naming the field unless the layout is encodable: page_size >= 1,
// d_c and 2 d_r row widths of 16, 32, 64 or a multiple of 128 bytes.
void validate_fp8_layout(const Fp8CacheLayout& l);

// One token encoded: x8 [d_c], kpe [d_r] bf16 bits, scale. Returns false for a poisoned token.
// x and k_pe are fp32 (callers with bf16 values widen them first: exact).
bool encode_fp8_token(const float* x, int d_c, const float* k_pe, int d_r, uint8_t* x8, uint16_t* kpe, float* scale);

// Writes one encoded token at slot t of a page (page points at the page's first byte).
void store_fp8_token(const Fp8CacheLayout& l, uint8_t* page, int t, const uint8_t* x8, const uint16_t* kpe, float scale);
// Reads slot t back: x8 [d_c], kpe [d_r], scale.
void load_fp8_token(const Fp8CacheLayout& l, const uint8_t* page, int t, uint8_t* x8, uint16_t* kpe, float* scale);
// Slot t dequantised to fp32: x [d_c] = e4m3 * s, k_pe [d_r] = bf16 * s (fp32 products).
void dequant_fp8_token(const Fp8CacheLayout& l, const uint8_t* page, int t, float* x, float* k_pe);

// CPU twin of the append kernel: kv_new [batch, n_new, d_c + d_r] bf16 bits written at positions
// positions[b] .. positions[b] + n_new - 1 of each request's pages (cache: num_pages pages of
// l.page_bytes()). Throws InputError on a page id or position out of range.
void fp8_cache_append_twin(const Fp8CacheLayout& l, const uint16_t* kv_new, int batch, int n_new,
                           const int32_t* positions, const int32_t* page_table, int max_pages, uint8_t* cache,
                           int num_pages);

// Query quantisation per (token, head) row: q [rows, d_c + d_r] bf16 bits ->
// q8 [rows, d_c] e4m3, q_rope [rows, d_r] bf16 bits (pre-divided by the row's scale),
// q_scale [rows] fp32 (NaN for a non-finite row, whose other outputs are zero).
void fp8_quantize_query_twin(const uint16_t* q, int rows, int d_c, int d_r, uint8_t* q8, uint16_t* q_rope,
                             float* q_scale);

// FlashMLA's V3.2 FP8 layout (656 B per token at d_c = 512, d_r = 64): per token
// [d_c e4m3 | d_c / 128 fp32 scales (each a power of two >= amax/448 of its 128 values) | d_r bf16
// RoPE, not divided]. Tokens of a block at block_stride bytes (FlashMLA's own allocator pads one
// token per block: block_stride = (block_size + 1) * 656).
struct FlashMlaV32Layout {
  int block_size = 64, d_c = 512, d_r = 64;
  size_t block_stride = 0;  // 0: block_size * bytes_per_token()
  size_t bytes_per_token() const { return static_cast<size_t>(d_c) + 4 * (d_c / 128) + 2 * d_r; }
  size_t stride() const { return block_stride ? block_stride : block_size * bytes_per_token(); }
};
// FlashMLA's quantize_k_cache for one token (tests/quant.py of the peer): scale_i =
// 2^ceil(log2(max(amax_i / 448, 1e-4))), x8 = E4M3(x / scale_i), rope as bf16. dst: bytes_per_token().
void encode_flashmla_v32_token(const FlashMlaV32Layout& l, const float* x, const float* k_pe, uint8_t* dst);
// Token src dequantised: x = e4m3 * scale_i, k_pe = bf16 (fp32).
void dequant_flashmla_v32_token(const FlashMlaV32Layout& l, const uint8_t* src, float* x, float* k_pe);
// Converts a V3.2 cache of num_blocks blocks into our layout (same page ids, same slots; needs
// l.page_size == v.block_size and equal d_c, d_r): each token dequantised exactly (power-of-two
// scales) and re-encoded with one per-token scale.
void convert_flashmla_v32_cache(const FlashMlaV32Layout& v, const uint8_t* src, int num_blocks, const Fp8CacheLayout& l,
                                uint8_t* dst);

}  // namespace mla::quant
