#pragma once
// The paged 4-bit latent caches' page layouts (no dependencies beyond fp8_cache_layout.hpp:
// included by the CUDA kernels and by quant/fp4_cache_format.hpp / codebook_cache_format.hpp,
// which document the encodings; docs/formats/kv-fp4.md has the byte diagrams).
//
// FP4 page of P tokens (d_c latent channels, d_r RoPE channels):
//   [codes: P * d_c/2 B][scales: P * d_c/32 B][rope: P * 2 d_r B]   400 B/token at 512/64
// Codebook page:
//   [codes: P * d_c/2 B][scale:  P * 4 B fp32][rope: P * 2 d_r B]   388 B/token at 512/64
// Every section is stored as the FP8 cache stores its sections (Fp8CacheLayout::section_byte):
// column blocks of W = min(128, row bytes) bytes, token-major inside a block, the 16-byte
// chunks permuted by fp8_swizzle. A section whose rows are narrower than 16 bytes (the FP4
// scales below d_c = 512, the codebook's fp32 scale) has no 16-byte chunk to permute and is
// stored plainly, token t's row at t * row_bytes.
// Codes: two per byte, the low nibble holds the even index (core/dtype.hpp, quant/fp4_kv.hpp).
#include <cstddef>
#include <cstdint>

#include "quant/fp8_cache_layout.hpp"

namespace mla::quant {

// Values per UE8M0 scale byte (= quant/fp4_kv.hpp's kFp4Group, checked there).
inline constexpr int kFp4CacheGroup = 32;
// UE8M0 byte of a poisoned token's scales (E8M0 NaN).
inline constexpr uint8_t kFp4PoisonScale = 0xFF;
// Levels of a codebook table (4-bit indices).
inline constexpr int kCodebookLevels = 16;

// Offset inside a page of byte i (< row_bytes) of token t's row in the section at `base`.
MLA_FP8_HD inline size_t kv4_section_byte(size_t base, int page_size, int row_bytes, int t, int i) {
  if (row_bytes < 16) return base + static_cast<size_t>(t) * row_bytes + i;
  return Fp8CacheLayout::section_byte(base, page_size, row_bytes, t, i);
}

struct Fp4CacheLayout {
  int page_size = 64, d_c = 512, d_r = 64;

  MLA_FP8_HD constexpr int code_row_bytes() const { return d_c / 2; }
  MLA_FP8_HD constexpr int scale_row_bytes() const { return d_c / kFp4CacheGroup; }
  MLA_FP8_HD constexpr size_t bytes_per_token() const {
    return static_cast<size_t>(code_row_bytes()) + scale_row_bytes() + 2 * static_cast<size_t>(d_r);
  }
  MLA_FP8_HD constexpr size_t page_bytes() const { return bytes_per_token() * page_size; }
  MLA_FP8_HD constexpr size_t scale_offset() const { return static_cast<size_t>(page_size) * code_row_bytes(); }
  MLA_FP8_HD constexpr size_t rope_offset() const { return scale_offset() + static_cast<size_t>(page_size) * scale_row_bytes(); }
  // Byte i (< d_c/2) of token t's codes: values 2i (low nibble) and 2i+1 (high nibble).
  MLA_FP8_HD size_t code_byte(int t, int i) const { return kv4_section_byte(0, page_size, code_row_bytes(), t, i); }
  // The UE8M0 byte of group k (values [32k, 32k + 32)) of token t.
  MLA_FP8_HD size_t scale_byte(int t, int k) const {
    return kv4_section_byte(scale_offset(), page_size, scale_row_bytes(), t, k);
  }
  // Byte offset of the low byte of rope value i (bf16) of token t.
  MLA_FP8_HD size_t rope_byte(int t, int i) const {
    return kv4_section_byte(rope_offset(), page_size, 2 * d_r, t, 2 * i);
  }
};

struct CodebookCacheLayout {
  int page_size = 64, d_c = 512, d_r = 64;

  MLA_FP8_HD constexpr int code_row_bytes() const { return d_c / 2; }
  MLA_FP8_HD constexpr size_t bytes_per_token() const { return static_cast<size_t>(code_row_bytes()) + 4 + 2 * static_cast<size_t>(d_r); }
  MLA_FP8_HD constexpr size_t page_bytes() const { return bytes_per_token() * page_size; }
  MLA_FP8_HD constexpr size_t scale_offset() const { return static_cast<size_t>(page_size) * code_row_bytes(); }
  MLA_FP8_HD constexpr size_t rope_offset() const { return scale_offset() + 4 * static_cast<size_t>(page_size); }
  MLA_FP8_HD size_t code_byte(int t, int i) const { return kv4_section_byte(0, page_size, code_row_bytes(), t, i); }
  // The fp32 scale of token t (4 bytes, little-endian).
  MLA_FP8_HD size_t scale_byte(int t) const { return scale_offset() + 4 * static_cast<size_t>(t); }
  MLA_FP8_HD size_t rope_byte(int t, int i) const {
    return kv4_section_byte(rope_offset(), page_size, 2 * d_r, t, 2 * i);
  }
};

}  // namespace mla::quant
