#include "quant/fp8_cache_format.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/fp8_kv.hpp"

namespace mla::quant {

static_assert(kFp8CacheMax == kE4M3Max && kFp8CacheTiny == kFp8MinAmax, "one set of FP8 constants");

namespace {

bool encodable_width(int bytes) { return bytes == 16 || bytes == 32 || bytes == 64 || (bytes > 0 && bytes % 128 == 0); }

float poison_scale() { return std::bit_cast<float>(kFp8PoisonScaleBits); }

}  // namespace

void validate_fp8_layout(const Fp8CacheLayout& l) {
  if (l.page_size < 1) throw InputError("fp8 cache layout: page_size = " + std::to_string(l.page_size) + " (must be >= 1)");
  if (!encodable_width(l.d_c))
    throw InputError("fp8 cache layout: d_c = " + std::to_string(l.d_c) + " (supported: 16, 32, 64 or a multiple of 128)");
  if (!encodable_width(2 * l.d_r))
    throw InputError("fp8 cache layout: d_r = " + std::to_string(l.d_r) + " (supported: 8, 16, 32 or a multiple of 64)");
}

bool encode_fp8_token(const float* x, int d_c, const float* k_pe, int d_r, uint8_t* x8, uint16_t* kpe, float* scale) {
  bool finite = true;
  float amax = 0.0f;
  for (int i = 0; i < d_c; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  for (int i = 0; i < d_r; ++i) finite = finite && std::isfinite(k_pe[i]);
  if (!finite) {
    std::fill(x8, x8 + d_c, uint8_t{0});
    std::fill(kpe, kpe + d_r, uint16_t{0});
    *scale = poison_scale();
    return false;
  }
  const float s = std::max(amax, kFp8CacheTiny) / kFp8CacheMax;
  for (int i = 0; i < d_c; ++i) x8[i] = float_to_e4m3(x[i] / s);
  for (int i = 0; i < d_r; ++i) kpe[i] = float_to_bf16(k_pe[i] / s);
  *scale = s;
  return true;
}

void store_fp8_token(const Fp8CacheLayout& l, uint8_t* page, int t, const uint8_t* x8, const uint16_t* kpe, float scale) {
  for (int i = 0; i < l.d_c; ++i) page[l.latent_byte(t, i)] = x8[i];
  for (int i = 0; i < l.d_r; ++i) std::memcpy(page + l.rope_byte(t, i), &kpe[i], 2);
  std::memcpy(page + l.scale_byte(t), &scale, 4);
}

void load_fp8_token(const Fp8CacheLayout& l, const uint8_t* page, int t, uint8_t* x8, uint16_t* kpe, float* scale) {
  for (int i = 0; i < l.d_c; ++i) x8[i] = page[l.latent_byte(t, i)];
  for (int i = 0; i < l.d_r; ++i) std::memcpy(&kpe[i], page + l.rope_byte(t, i), 2);
  std::memcpy(scale, page + l.scale_byte(t), 4);
}

void dequant_fp8_token(const Fp8CacheLayout& l, const uint8_t* page, int t, float* x, float* k_pe) {
  std::vector<uint8_t> x8(l.d_c);
  std::vector<uint16_t> kpe(l.d_r);
  float s = 0.f;
  load_fp8_token(l, page, t, x8.data(), kpe.data(), &s);
  for (int i = 0; i < l.d_c; ++i) x[i] = e4m3_to_float(x8[i]) * s;
  for (int i = 0; i < l.d_r; ++i) k_pe[i] = bf16_to_float(kpe[i]) * s;
}

void fp8_cache_append_twin(const Fp8CacheLayout& l, const uint16_t* kv_new, int batch, int n_new,
                           const int32_t* positions, const int32_t* page_table, int max_pages, uint8_t* cache,
                           int num_pages) {
  validate_fp8_layout(l);
  const int dim = l.d_c + l.d_r;
  std::vector<float> xf(l.d_c), kf(l.d_r);
  std::vector<uint8_t> x8(l.d_c);
  std::vector<uint16_t> kpe(l.d_r);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < n_new; ++i) {
      const long long pos = static_cast<long long>(positions[b]) + i;
      const long long slot = pos / l.page_size;
      if (pos < 0 || slot >= max_pages)
        throw InputError("fp8 cache append: position " + std::to_string(pos) + " of request " + std::to_string(b) +
                         " is outside [0, max_pages * page_size = " +
                         std::to_string(static_cast<long long>(max_pages) * l.page_size) + ")");
      const int page = page_table[static_cast<size_t>(b) * max_pages + slot];
      if (page < 0 || page >= num_pages)
        throw InputError("fp8 cache append: page_table[" + std::to_string(b) + "][" + std::to_string(slot) + "] = " +
                         std::to_string(page) + " is outside [0, num_pages = " + std::to_string(num_pages) + ")");
      const uint16_t* src = kv_new + (static_cast<size_t>(b) * n_new + i) * dim;
      for (int c = 0; c < l.d_c; ++c) xf[c] = bf16_to_float(src[c]);
      for (int c = 0; c < l.d_r; ++c) kf[c] = bf16_to_float(src[l.d_c + c]);
      float s = 0.f;
      encode_fp8_token(xf.data(), l.d_c, kf.data(), l.d_r, x8.data(), kpe.data(), &s);
      store_fp8_token(l, cache + static_cast<size_t>(page) * l.page_bytes(), static_cast<int>(pos % l.page_size),
                      x8.data(), kpe.data(), s);
    }
}

void fp8_quantize_query_twin(const uint16_t* q, int rows, int d_c, int d_r, uint8_t* q8, uint16_t* q_rope,
                             float* q_scale) {
  const int dim = d_c + d_r;
  std::vector<float> xf(d_c), kf(d_r);
  for (int r = 0; r < rows; ++r) {
    const uint16_t* src = q + static_cast<size_t>(r) * dim;
    for (int c = 0; c < d_c; ++c) xf[c] = bf16_to_float(src[c]);
    for (int c = 0; c < d_r; ++c) kf[c] = bf16_to_float(src[d_c + c]);
    encode_fp8_token(xf.data(), d_c, kf.data(), d_r, q8 + static_cast<size_t>(r) * d_c,
                     q_rope + static_cast<size_t>(r) * d_r, q_scale + r);
  }
}

// ---- FlashMLA V3.2 ----

void encode_flashmla_v32_token(const FlashMlaV32Layout& l, const float* x, const float* k_pe, uint8_t* dst) {
  const int tiles = l.d_c / 128;
  for (int k = 0; k < tiles; ++k) {
    float amax = 0.f;
    for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[k * 128 + i]));
    const float inv = amax / kFp8CacheMax;
    const float s = std::exp2(std::ceil(std::log2(std::max(inv, 1e-4f))));
    for (int i = 0; i < 128; ++i) dst[k * 128 + i] = float_to_e4m3(x[k * 128 + i] / s);
    std::memcpy(dst + l.d_c + 4 * k, &s, 4);
  }
  for (int i = 0; i < l.d_r; ++i) {
    const uint16_t b = float_to_bf16(k_pe[i]);
    std::memcpy(dst + l.d_c + 4 * tiles + 2 * i, &b, 2);
  }
}

void dequant_flashmla_v32_token(const FlashMlaV32Layout& l, const uint8_t* src, float* x, float* k_pe) {
  const int tiles = l.d_c / 128;
  for (int k = 0; k < tiles; ++k) {
    float s;
    std::memcpy(&s, src + l.d_c + 4 * k, 4);
    for (int i = 0; i < 128; ++i) x[k * 128 + i] = e4m3_to_float(src[k * 128 + i]) * s;
  }
  for (int i = 0; i < l.d_r; ++i) {
    uint16_t b;
    std::memcpy(&b, src + l.d_c + 4 * tiles + 2 * i, 2);
    k_pe[i] = bf16_to_float(b);
  }
}

void convert_flashmla_v32_cache(const FlashMlaV32Layout& v, const uint8_t* src, int num_blocks, const Fp8CacheLayout& l,
                                uint8_t* dst) {
  validate_fp8_layout(l);
  if (v.d_c % 128 != 0 || v.d_c < 128)
    throw InputError("FlashMLA V3.2 layout: d_c = " + std::to_string(v.d_c) + " (must be a multiple of 128)");
  if (v.block_size != l.page_size)
    throw InputError("FlashMLA V3.2 conversion: block_size = " + std::to_string(v.block_size) +
                     " differs from page_size = " + std::to_string(l.page_size));
  if (v.d_c != l.d_c || v.d_r != l.d_r)
    throw InputError("FlashMLA V3.2 conversion: (d_c, d_r) = (" + std::to_string(v.d_c) + ", " + std::to_string(v.d_r) +
                     ") differs from the target's (" + std::to_string(l.d_c) + ", " + std::to_string(l.d_r) + ")");
  if (v.stride() < v.block_size * v.bytes_per_token())
    throw InputError("FlashMLA V3.2 layout: block_stride = " + std::to_string(v.stride()) + " is smaller than " +
                     std::to_string(v.block_size * v.bytes_per_token()));
  std::vector<float> x(l.d_c), k(l.d_r);
  std::vector<uint8_t> x8(l.d_c);
  std::vector<uint16_t> kpe(l.d_r);
  for (int b = 0; b < num_blocks; ++b)
    for (int t = 0; t < v.block_size; ++t) {
      dequant_flashmla_v32_token(v, src + b * v.stride() + t * v.bytes_per_token(), x.data(), k.data());
      float s = 0.f;
      encode_fp8_token(x.data(), l.d_c, k.data(), l.d_r, x8.data(), kpe.data(), &s);
      store_fp8_token(l, dst + static_cast<size_t>(b) * l.page_bytes(), t, x8.data(), kpe.data(), s);
    }
}

}  // namespace mla::quant
