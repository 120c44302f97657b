#include "quant/fp4_cache_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/kv4_cache_common.hpp"

namespace mla::quant {

static_assert(kFp4CacheGroup == static_cast<int>(kFp4Group), "one FP4 group size");

void validate_fp4_layout(const Fp4CacheLayout& l) { validate_kv4_dims("fp4 cache layout", l.page_size, l.d_c, l.d_r); }

void validate_fp4_encoding(const Fp4CacheEncoding& e) {
  if (!(std::isfinite(e.c) && e.c > 0.f))
    throw InputError("fp4 cache encoding: c = " + std::to_string(e.c) + " (must be finite and > 0)");
}

bool encode_fp4_token(const Fp4CacheEncoding& e, const float* x, int d_c, const float* k_pe, int d_r,
                      uint8_t* codes, uint8_t* scales, uint16_t* kpe) {
  bool finite = true;
  for (int i = 0; i < d_c; ++i) finite = finite && std::isfinite(x[i]);
  for (int i = 0; i < d_r; ++i) finite = finite && std::isfinite(k_pe[i]);
  if (!finite) {
    std::fill(codes, codes + d_c / 2, uint8_t{0});
    std::fill(scales, scales + d_c / kFp4CacheGroup, kFp4PoisonScale);
    std::fill(kpe, kpe + d_r, uint16_t{0});
    return false;
  }
  encode_fp4_mx(x, static_cast<size_t>(d_c), e.rule, e.c, codes, scales);
  for (int i = 0; i < d_r; ++i) kpe[i] = float_to_bf16(k_pe[i]);
  return true;
}

void store_fp4_token(const Fp4CacheLayout& l, uint8_t* page, int t, const uint8_t* codes, const uint8_t* scales,
                     const uint16_t* kpe) {
  for (int i = 0; i < l.code_row_bytes(); ++i) page[l.code_byte(t, i)] = codes[i];
  for (int k = 0; k < l.scale_row_bytes(); ++k) page[l.scale_byte(t, k)] = scales[k];
  for (int i = 0; i < l.d_r; ++i) std::memcpy(page + l.rope_byte(t, i), &kpe[i], 2);
}

void load_fp4_token(const Fp4CacheLayout& l, const uint8_t* page, int t, uint8_t* codes, uint8_t* scales,
                    uint16_t* kpe) {
  for (int i = 0; i < l.code_row_bytes(); ++i) codes[i] = page[l.code_byte(t, i)];
  for (int k = 0; k < l.scale_row_bytes(); ++k) scales[k] = page[l.scale_byte(t, k)];
  for (int i = 0; i < l.d_r; ++i) std::memcpy(&kpe[i], page + l.rope_byte(t, i), 2);
}

uint16_t fp4_dequant_bf16(uint8_t code, uint8_t scale_byte) {
  // ue8m0_to_float(0xFF) is NaN; 2^(b-127) is exact in fp32 for b in [0, 254] (2^-127 is a
  // subnormal), and so is the product with an E2M1 value unless it reaches 2^128 (-> Inf).
  return float_to_bf16(e2m1_to_float(code & 0xF) * ue8m0_to_float(scale_byte));
}

void dequant_fp4_token_bf16(const Fp4CacheLayout& l, const uint8_t* page, int t, uint16_t* row) {
  for (int i = 0; i < l.code_row_bytes(); ++i) {
    const uint8_t byte = page[l.code_byte(t, i)];
    const uint8_t sb = page[l.scale_byte(t, (2 * i) / kFp4CacheGroup)];
    row[2 * i] = fp4_dequant_bf16(byte & 0xF, sb);
    row[2 * i + 1] = fp4_dequant_bf16(byte >> 4, sb);
  }
  for (int i = 0; i < l.d_r; ++i) std::memcpy(&row[l.d_c + i], page + l.rope_byte(t, i), 2);
}

void fp4_cache_append_twin(const Fp4CacheLayout& l, const Fp4CacheEncoding& e, const uint16_t* kv_new, int batch,
                           int n_new, const int32_t* positions, const int32_t* page_table, int max_pages,
                           uint8_t* cache, int num_pages) {
  validate_fp4_layout(l);
  validate_fp4_encoding(e);
  std::vector<uint8_t> codes(l.code_row_bytes()), scales(l.scale_row_bytes());
  std::vector<uint16_t> kpe(l.d_r);
  kv4_append_rows("fp4 cache append", l.page_size, l.page_bytes(), l.d_c, l.d_r, kv_new, batch, n_new, positions,
                  page_table, max_pages, cache, num_pages, [&](uint8_t* page, int slot, const float* x, const float* k) {
                    encode_fp4_token(e, x, l.d_c, k, l.d_r, codes.data(), scales.data(), kpe.data());
                    store_fp4_token(l, page, slot, codes.data(), scales.data(), kpe.data());
                  });
}

void fp4_cache_to_bf16(const Fp4CacheLayout& l, const uint8_t* cache, int num_pages, uint16_t* bf16_cache) {
  validate_fp4_layout(l);
  kv4_pages_to_bf16(l.page_size, l.page_bytes(), l.d_c + l.d_r, cache, num_pages, bf16_cache,
                    [&](const uint8_t* page, int slot, uint16_t* row) { dequant_fp4_token_bf16(l, page, slot, row); });
}

}  // namespace mla::quant
