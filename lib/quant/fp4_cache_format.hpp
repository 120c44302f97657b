#pragma once
// The paged FP4 latent cache (SPEC section 4, UltraQuant-style; docs/formats/kv-fp4.md has the
// byte diagram): the per-token encoding shared by the append kernel and its CPU twin, and the
// dequantisation to BF16 that the decode kernel and its twin share.
//
// Layout: quant/fp4_cache_layout.hpp (400 B/token at d_c = 512, d_r = 64). The latent x is the
// converted model's (already Hadamard-rotated by mla-convert --kv fp4: nothing rotates here).
//
// Encoding of one token (fp32; bf16 inputs widened exactly), per group k of 32 values:
//   m_k = max |x_i| over the group;  b_k = fp4_scale_byte(m_k, rule, c)   (quant/fp4_kv.hpp:
//   Round: E = round(log2(c m)) decided on the mantissa of the fp32 product c*m; b = E + 127,
//   E clamped to [-127, 127]; m = 0 gives b = 0 and zero codes)
//   code_i = E2M1(x_i * 2^-E)  (round to nearest even, saturating at +-6; the scaling is exact
//   except where the quotient underflows far below E2M1's first threshold 0.25)
//   k_pe stored as BF16, unscaled.
// Poisoned token (any non-finite value in x or k_pe): every scale byte 0xFF (E8M0 NaN), codes
// and rope zero.
//
// Dequantisation (THE rounding point shared with the GPU): value_i = BF16_RNE(e2m1(code_i) *
// 2^(b_k - 127)) with the product in fp32. Every finite product has at most 2 significant bits
// and an exponent in [-128, 129], so BF16 holds it exactly (2^-128 and 3 * 2^-128 are BF16
// subnormals: no flush to zero allowed) except when it reaches 2^128: code magnitude >= 2 with
// b = 254, or >= 4 with b = 253, gives +-Inf. That needs a group absmax above ~2^126, which a
// normalised latent (|x| <= sqrt(d_c) * max gamma) never has. b = 0xFF gives NaN (poisoned).
// The decode is the BF16 decode on the dequantised rows: k_pe is copied as stored.
#include <cstddef>
#include <cstdint>

#include "quant/fp4_cache_layout.hpp"
#include "quant/fp4_kv.hpp"

namespace mla::quant {

// The scale rule and constant a layer's cache is written with (c is used by Round only).
struct Fp4CacheEncoding {
  Fp4ScaleRule rule = Fp4ScaleRule::Round;
  float c = 0.156f;
};

// Throws mla::InputError naming the field unless the layout is encodable (kv4_cache_common.hpp:
// d_c a power of two in [32, 4096], d_r 8, 16, 32 or a multiple of 64, page_size >= 1), and
// unless c is finite and > 0.
void validate_fp4_layout(const Fp4CacheLayout& l);
void validate_fp4_encoding(const Fp4CacheEncoding& e);

// One token encoded: codes [d_c/2], scales [d_c/32], kpe [d_r] bf16 bits. Returns false for a
// poisoned token.
bool encode_fp4_token(const Fp4CacheEncoding& e, const float* x, int d_c, const float* k_pe, int d_r,
                      uint8_t* codes, uint8_t* scales, uint16_t* kpe);

// Slot t of a page: write / read the encoded token.
void store_fp4_token(const Fp4CacheLayout& l, uint8_t* page, int t, const uint8_t* codes, const uint8_t* scales,
                     const uint16_t* kpe);
void load_fp4_token(const Fp4CacheLayout& l, const uint8_t* page, int t, uint8_t* codes, uint8_t* scales,
                    uint16_t* kpe);

// The dequantised BF16 value of one code under one scale byte (the rule above).
uint16_t fp4_dequant_bf16(uint8_t code, uint8_t scale_byte);
// Slot t dequantised to one BF16 cache row [d_c | d_r] (bf16 bits).
void dequant_fp4_token_bf16(const Fp4CacheLayout& l, const uint8_t* page, int t, uint16_t* row);

// CPU twin of the append kernel: kv_new [batch, n_new, d_c + d_r] bf16 bits written at
// positions[b] .. positions[b] + n_new - 1 of each request's pages (cache: num_pages pages of
// l.page_bytes()). Throws InputError on a page id or position out of range.
void fp4_cache_append_twin(const Fp4CacheLayout& l, const Fp4CacheEncoding& e, const uint16_t* kv_new, int batch,
                           int n_new, const int32_t* positions, const int32_t* page_table, int max_pages,
                           uint8_t* cache, int num_pages);

// Every slot of every page dequantised: bf16 [num_pages, page_size, d_c + d_r], same page ids
// (the input of quant/decode_twin_bf16.hpp: the FP4 decode twin).
void fp4_cache_to_bf16(const Fp4CacheLayout& l, const uint8_t* cache, int num_pages, uint16_t* bf16_cache);

}  // namespace mla::quant
