#pragma once
// What the two 4-bit paged caches (quant/fp4_cache_format.hpp, quant/codebook_cache_format.hpp)
// share: the accepted widths, the append loop (page-table and position checks, BF16 rows
// widened to fp32) and the decode path (dequantise the pages to a BF16 paged cache with the
// same page ids, then the unchanged BF16 decode twin, quant/decode_twin_bf16.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace mla::quant {

// Throws mla::InputError naming `what` ("fp4 cache layout", ...) and the bad value unless
// page_size >= 1, d_c is a power of two in [32, 4096] (groups of 32 values; 16-byte code
// chunks; TPLA slices d_c/g are therefore refused when not a power of two) and 2 d_r is a
// row width the FP8 layout accepts (d_r = 8, 16, 32 or a multiple of 64).
void validate_kv4_dims(const std::string& what, int page_size, int d_c, int d_r);

// Encodes one token into slot `slot` of page `page` (x: d_c fp32, k_pe: d_r fp32).
using Kv4TokenWriter = std::function<void(uint8_t* page, int slot, const float* x, const float* k_pe)>;

// The append loop of both formats: kv_new [batch, n_new, d_c + d_r] bf16 bits written at
// positions[b] .. positions[b] + n_new - 1 of each request's pages (cache: num_pages pages of
// page_bytes). Throws InputError (prefixed by `what`) on a position or page id out of range.
void kv4_append_rows(const std::string& what, int page_size, size_t page_bytes, int d_c, int d_r,
                     const uint16_t* kv_new, int batch, int n_new, const int32_t* positions,
                     const int32_t* page_table, int max_pages, uint8_t* cache, int num_pages,
                     const Kv4TokenWriter& write);

// Dequantises slot t of a page into one BF16 cache row [d_c + d_r] (bf16 bits).
using Kv4TokenReader = std::function<void(const uint8_t* page, int slot, uint16_t* row)>;
// Every slot of every page -> bf16 [num_pages, page_size, d_c + d_r] (the BF16 cache layout of
// quant/decode_twin_bf16.hpp, same page ids).
void kv4_pages_to_bf16(int page_size, size_t page_bytes, int dim, const uint8_t* cache, int num_pages,
                       uint16_t* bf16_cache, const Kv4TokenReader& read);

}  // namespace mla::quant
