#pragma once
// The paged FP8 latent cache's page layout (no dependencies: included by the CUDA kernels and by
// quant/fp8_cache_format.hpp, which documents the format; docs/formats/kv-fp8.md has the byte
// diagram).
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define MLA_FP8_HD __host__ __device__
#else
#define MLA_FP8_HD
#endif

namespace mla::quant {

// The format's constants (equal to quant/fp8_kv.hpp's kE4M3Max and kFp8MinAmax, checked there).
inline constexpr float kFp8CacheMax = 448.0f;
inline constexpr float kFp8CacheTiny = 1e-12f;
// Canonical quiet NaN written as the scale of a poisoned token.
inline constexpr uint32_t kFp8PoisonScaleBits = 0x7FC00000u;

// Width in bytes of one column block of a section whose rows are row_bytes wide.
MLA_FP8_HD inline int fp8_block_width(int row_bytes) { return row_bytes < 128 ? row_bytes : 128; }
// The swizzled byte offset, inside a column block of width w, of linear offset a (= t w + i).
MLA_FP8_HD inline uint32_t fp8_swizzle(uint32_t a, int w) {
  return a ^ (((a >> 7) & static_cast<uint32_t>(w / 16 - 1)) << 4);
}

struct Fp8CacheLayout {
  int page_size = 64, d_c = 512, d_r = 64;

  MLA_FP8_HD constexpr size_t bytes_per_token() const { return static_cast<size_t>(d_c) + 2 * d_r + 4; }
  MLA_FP8_HD constexpr size_t page_bytes() const { return bytes_per_token() * page_size; }
  MLA_FP8_HD constexpr size_t rope_offset() const { return static_cast<size_t>(page_size) * d_c; }
  MLA_FP8_HD constexpr size_t scale_offset() const { return rope_offset() + static_cast<size_t>(page_size) * 2 * d_r; }
  // Offset inside a page of byte i (< row_bytes) of token t's row in the section at `base`.
  MLA_FP8_HD static size_t section_byte(size_t base, int page_size, int row_bytes, int t, int i) {
    const int w = fp8_block_width(row_bytes);
    const int kb = i / w;
    return base + static_cast<size_t>(kb) * page_size * w + fp8_swizzle(static_cast<uint32_t>(t * w + i % w), w);
  }
  MLA_FP8_HD size_t latent_byte(int t, int i) const { return section_byte(0, page_size, d_c, t, i); }
  // Byte offset of the low byte of rope value i (bf16) of token t.
  MLA_FP8_HD size_t rope_byte(int t, int i) const { return section_byte(rope_offset(), page_size, 2 * d_r, t, 2 * i); }
  MLA_FP8_HD size_t scale_byte(int t) const { return scale_offset() + 4 * static_cast<size_t>(t); }
};

}  // namespace mla::quant
