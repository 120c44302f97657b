#include "quant/fp4_to_fp8.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/dtype.hpp"
#include "quant/fp4_cache_format.hpp"
#include "quant/fp8_cache_format.hpp"

namespace mla::quant {

void fp4_cache_to_fp8(const Fp4CacheLayout& l, const uint8_t* fp4_pages, int num_pages, uint8_t* fp8_pages) {
  validate_fp4_layout(l);
  const Fp8CacheLayout l8{l.page_size, l.d_c, l.d_r};
  validate_fp8_layout(l8);
  std::vector<uint8_t> codes(l.code_row_bytes()), scales(l.scale_row_bytes()), x8(l.d_c);
  std::vector<uint16_t> kpe(l.d_r), kpe8(l.d_r);
  for (int pg = 0; pg < num_pages; ++pg) {
    const uint8_t* in = fp4_pages + static_cast<size_t>(pg) * l.page_bytes();
    uint8_t* out = fp8_pages + static_cast<size_t>(pg) * l8.page_bytes();
    for (int t = 0; t < l.page_size; ++t) {
      load_fp4_token(l, in, t, codes.data(), scales.data(), kpe.data());
      const uint8_t bmax = *std::max_element(scales.begin(), scales.end());
      if (bmax == kFp4PoisonScale) {
        std::fill(x8.begin(), x8.end(), uint8_t{0});
        std::fill(kpe8.begin(), kpe8.end(), uint16_t{0});
        store_fp8_token(l8, out, t, x8.data(), kpe8.data(), std::bit_cast<float>(kFp8PoisonScaleBits));
        continue;
      }
      const int e = std::max(static_cast<int>(bmax) - 127, kFp4ToFp8MinExponent);
      for (int i = 0; i < l.d_c; ++i) {
        const uint8_t code = (i % 2) ? codes[i / 2] >> 4 : codes[i / 2] & 0xF;
        const int k = static_cast<int>(scales[i / kFp4CacheGroup]) - 127 - e + 6;
        x8[i] = float_to_e4m3(std::ldexp(e2m1_to_float(code), k));
      }
      for (int i = 0; i < l.d_r; ++i) kpe8[i] = float_to_bf16(std::ldexp(bf16_to_float(kpe[i]), 6 - e));
      store_fp8_token(l8, out, t, x8.data(), kpe8.data(), std::ldexp(1.0f, e - 6));
    }
  }
}

}  // namespace mla::quant
