#include "quant/codebook_cache_format.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/kv4_cache_common.hpp"

namespace mla::quant {
namespace {

constexpr int kLanes = 32;  // the GPU warp whose reduction order the scale follows

float poison_scale() { return std::bit_cast<float>(kFp8PoisonScaleBits); }

}  // namespace

void validate_codebook_layout(const CodebookCacheLayout& l) {
  validate_kv4_dims("codebook cache layout", l.page_size, l.d_c, l.d_r);
}

void validate_codebook_table(const CodebookTable& t) {
  for (int k = 0; k < kCodebookLevels; ++k) {
    if (!std::isfinite(t.levels[k]))
      throw InputError("codebook table: level " + std::to_string(k) + " = " + std::to_string(t.levels[k]) +
                       " (must be finite)");
    if (k > 0 && !(t.levels[k] > t.levels[k - 1]))
      throw InputError("codebook table: level " + std::to_string(k) + " = " + std::to_string(t.levels[k]) +
                       " is not above level " + std::to_string(k - 1) + " = " + std::to_string(t.levels[k - 1]));
  }
}

CodebookTable codebook_unit_levels(const std::vector<double>& levels, double mean_square) {
  if (levels.size() != static_cast<size_t>(kCodebookLevels))
    throw InputError("codebook: " + std::to_string(levels.size()) + " levels (the 4-bit cache needs 16)");
  if (!(std::isfinite(mean_square) && mean_square > 0))
    throw InputError("codebook: mean_square = " + std::to_string(mean_square) + " (must be finite and > 0)");
  CodebookTable t;
  const double rms = std::sqrt(mean_square);
  for (int k = 0; k < kCodebookLevels; ++k) t.levels[k] = static_cast<float>(levels[k] / rms);
  validate_codebook_table(t);
  return t;
}

float codebook_token_scale(const float* x, int d_c) {
  float acc[kLanes] = {};
  for (int l = 0; l < kLanes; ++l)
    for (int i = l; i < d_c; i += kLanes) acc[l] = std::fma(x[i], x[i], acc[l]);
  for (int o = kLanes / 2; o >= 1; o /= 2) {
    float next[kLanes];
    for (int l = 0; l < kLanes; ++l) next[l] = acc[l] + acc[l ^ o];
    std::copy(next, next + kLanes, acc);
  }
  return std::sqrt(acc[0] / static_cast<float>(d_c));
}

uint8_t codebook_index(const CodebookTable& t, float v) {
  uint8_t idx = 0;
  for (int k = 0; k + 1 < kCodebookLevels; ++k)
    if (v > 0.5f * (t.levels[k] + t.levels[k + 1])) idx = static_cast<uint8_t>(k + 1);
  return idx;
}

bool encode_codebook_token(const CodebookTable& t, const float* x, int d_c, const float* k_pe, int d_r,
                           uint8_t* codes, float* scale, uint16_t* kpe) {
  bool finite = true;
  for (int i = 0; i < d_c; ++i) finite = finite && std::isfinite(x[i]);
  for (int i = 0; i < d_r; ++i) finite = finite && std::isfinite(k_pe[i]);
  const float s = finite ? codebook_token_scale(x, d_c) : 0.f;
  std::fill(codes, codes + d_c / 2, uint8_t{0});
  if (!finite || !std::isfinite(s)) {
    std::fill(kpe, kpe + d_r, uint16_t{0});
    *scale = poison_scale();
    return false;
  }
  for (int i = 0; i < d_c; ++i) {
    const uint8_t idx = codebook_index(t, s > 0.f ? x[i] / s : 0.f);
    codes[i / 2] |= static_cast<uint8_t>(i % 2 ? idx << 4 : idx);
  }
  for (int i = 0; i < d_r; ++i) kpe[i] = float_to_bf16(k_pe[i]);
  *scale = s;
  return true;
}

void store_codebook_token(const CodebookCacheLayout& l, uint8_t* page, int t, const uint8_t* codes, float scale,
                          const uint16_t* kpe) {
  for (int i = 0; i < l.code_row_bytes(); ++i) page[l.code_byte(t, i)] = codes[i];
  std::memcpy(page + l.scale_byte(t), &scale, 4);
  for (int i = 0; i < l.d_r; ++i) std::memcpy(page + l.rope_byte(t, i), &kpe[i], 2);
}

void load_codebook_token(const CodebookCacheLayout& l, const uint8_t* page, int t, uint8_t* codes, float* scale,
                         uint16_t* kpe) {
  for (int i = 0; i < l.code_row_bytes(); ++i) codes[i] = page[l.code_byte(t, i)];
  std::memcpy(scale, page + l.scale_byte(t), 4);
  for (int i = 0; i < l.d_r; ++i) std::memcpy(&kpe[i], page + l.rope_byte(t, i), 2);
}

uint16_t codebook_dequant_bf16(const CodebookTable& t, uint8_t index, float scale) {
  return float_to_bf16(t.levels[index & 0xF] * scale);
}

void dequant_codebook_token_bf16(const CodebookCacheLayout& l, const CodebookTable& t, const uint8_t* page, int slot,
                                 uint16_t* row) {
  float s;
  std::memcpy(&s, page + l.scale_byte(slot), 4);
  for (int i = 0; i < l.code_row_bytes(); ++i) {
    const uint8_t byte = page[l.code_byte(slot, i)];
    row[2 * i] = codebook_dequant_bf16(t, byte & 0xF, s);
    row[2 * i + 1] = codebook_dequant_bf16(t, byte >> 4, s);
  }
  for (int i = 0; i < l.d_r; ++i) std::memcpy(&row[l.d_c + i], page + l.rope_byte(slot, i), 2);
}

void codebook_cache_append_twin(const CodebookCacheLayout& l, const CodebookTable& t, const uint16_t* kv_new,
                                int batch, int n_new, const int32_t* positions, const int32_t* page_table,
                                int max_pages, uint8_t* cache, int num_pages) {
  validate_codebook_layout(l);
  validate_codebook_table(t);
  std::vector<uint8_t> codes(l.code_row_bytes());
  std::vector<uint16_t> kpe(l.d_r);
  kv4_append_rows("codebook cache append", l.page_size, l.page_bytes(), l.d_c, l.d_r, kv_new, batch, n_new, positions,
                  page_table, max_pages, cache, num_pages, [&](uint8_t* page, int slot, const float* x, const float* k) {
                    float s = 0.f;
                    encode_codebook_token(t, x, l.d_c, k, l.d_r, codes.data(), &s, kpe.data());
                    store_codebook_token(l, page, slot, codes.data(), s, kpe.data());
                  });
}

void codebook_cache_to_bf16(const CodebookCacheLayout& l, const CodebookTable& t, const uint8_t* cache, int num_pages,
                            uint16_t* bf16_cache) {
  validate_codebook_layout(l);
  kv4_pages_to_bf16(l.page_size, l.page_bytes(), l.d_c + l.d_r, cache, num_pages, bf16_cache,
                    [&](const uint8_t* page, int slot, uint16_t* row) {
                      dequant_codebook_token_bf16(l, t, page, slot, row);
                    });
}

}  // namespace mla::quant
