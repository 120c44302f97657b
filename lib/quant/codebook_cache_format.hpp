#pragma once
// The paged codebook latent cache (SPEC section 4 "Codebook", Ultra-TQ-style; docs/formats/
// kv-fp4.md has the byte diagram): 4-bit indices into a per-layer table of 16 fp32 levels, one
// fp32 scale per token, BF16 RoPE. Layout: quant/fp4_cache_layout.hpp (388 B/token at 512/64).
//
// The table is in units of the per-token RMS: mla-calibrate fits Lloyd-Max levels on the
// Hadamard-rotated cache coordinates (calib.h5 /layer_i/codebook/levels, values of
// U^T (gamma * c / rms(c))), and the converter/verifier divides them by the RMS of the values
// they were fitted on (the layer's fp4 `mean_square` attribute) so the table applies to x / s
// with s = RMS of the token's row: codebook_unit_levels below.
//
// Encoding of one token (fp32; bf16 inputs widened exactly), written so a GPU reproduces it:
//   sum of squares in a fixed order: 32 lane partials, lane l summing x_i for i = l, l + 32,
//   ... in increasing i with fmaf(x_i, x_i, acc); then the butterfly acc_l += acc_{l ^ o} for
//   o = 16, 8, 4, 2, 1 (every lane ends with the same value: fp32 addition commutes);
//   s = sqrtf(sum / d_c)   (IEEE division and square root, no fast-math)
//   v_i = x_i / s (IEEE division; v_i = 0 when s = 0)
//   index_i = number of k in [0, 15) with v_i > t_k, t_k = 0.5f * (level_k + level_{k+1})
//   (fp32 sum then exact halving): the nearest level, ties to the lower one.
// Poisoned token (any non-finite value in x or k_pe, or a sum of squares that overflows fp32:
// |x| above ~1e19, which a normalised latent never has): scale NaN, codes and rope zero.
// Dequantisation (THE rounding point shared with the GPU): value_i = BF16_RNE(level[index_i] *
// s), one fp32 multiply. k_pe stored plain BF16 and copied as stored.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/fp4_cache_layout.hpp"

namespace mla::quant {

// The table of one layer: 16 ascending finite fp32 levels.
struct CodebookTable {
  float levels[kCodebookLevels] = {};
};

// Throws InputError unless the layout is encodable (as validate_fp4_layout) / the table has 16
// strictly ascending finite levels.
void validate_codebook_layout(const CodebookCacheLayout& l);
void validate_codebook_table(const CodebookTable& t);

// Levels fitted on values of mean square `mean_square` -> the table in per-token RMS units
// (each level divided by sqrt(mean_square), rounded to fp32). Throws InputError naming the
// values unless there are 16 finite ascending levels and mean_square is finite and > 0.
CodebookTable codebook_unit_levels(const std::vector<double>& levels, double mean_square);

// The per-token scale s (the fixed-order RMS above) of x [d_c] (d_c a multiple of 32).
float codebook_token_scale(const float* x, int d_c);
// The index of v (nearest level, ties to the lower).
uint8_t codebook_index(const CodebookTable& t, float v);

// One token encoded: codes [d_c/2], scale, kpe [d_r] bf16 bits. Returns false when poisoned.
bool encode_codebook_token(const CodebookTable& t, const float* x, int d_c, const float* k_pe, int d_r,
                           uint8_t* codes, float* scale, uint16_t* kpe);
void store_codebook_token(const CodebookCacheLayout& l, uint8_t* page, int t, const uint8_t* codes, float scale,
                          const uint16_t* kpe);
void load_codebook_token(const CodebookCacheLayout& l, const uint8_t* page, int t, uint8_t* codes, float* scale,
                         uint16_t* kpe);

// The dequantised BF16 value of one index under a token scale.
uint16_t codebook_dequant_bf16(const CodebookTable& t, uint8_t index, float scale);
// Slot t dequantised to one BF16 cache row [d_c | d_r] (bf16 bits).
void dequant_codebook_token_bf16(const CodebookCacheLayout& l, const CodebookTable& t, const uint8_t* page, int slot,
                                 uint16_t* row);

// CPU twin of the append kernel (as fp4_cache_append_twin).
void codebook_cache_append_twin(const CodebookCacheLayout& l, const CodebookTable& t, const uint16_t* kv_new,
                                int batch, int n_new, const int32_t* positions, const int32_t* page_table,
                                int max_pages, uint8_t* cache, int num_pages);
// Every slot of every page dequantised: bf16 [num_pages, page_size, d_c + d_r], same page ids.
void codebook_cache_to_bf16(const CodebookCacheLayout& l, const CodebookTable& t, const uint8_t* cache, int num_pages,
                            uint16_t* bf16_cache);

}  // namespace mla::quant
