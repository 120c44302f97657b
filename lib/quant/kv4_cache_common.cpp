#include "quant/kv4_cache_common.hpp"

#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace mla::quant {

void validate_kv4_dims(const std::string& what, int page_size, int d_c, int d_r) {
  if (page_size < 1) throw InputError(what + ": page_size = " + std::to_string(page_size) + " (must be >= 1)");
  const bool pow2 = d_c >= 32 && d_c <= 4096 && (d_c & (d_c - 1)) == 0;
  if (!pow2)
    throw InputError(what + ": d_c = " + std::to_string(d_c) +
                     " (must be a power of two from 32 to 4096: scale groups of 32 values and 16-byte code chunks;"
                     " a TPLA slice d_c/g must be one too)");
  const int rb = 2 * d_r;
  if (!(rb == 16 || rb == 32 || rb == 64 || (rb > 0 && rb % 128 == 0)))
    throw InputError(what + ": d_r = " + std::to_string(d_r) + " (supported: 8, 16, 32 or a multiple of 64)");
}

void kv4_append_rows(const std::string& what, int page_size, size_t page_bytes, int d_c, int d_r,
                     const uint16_t* kv_new, int batch, int n_new, const int32_t* positions,
                     const int32_t* page_table, int max_pages, uint8_t* cache, int num_pages,
                     const Kv4TokenWriter& write) {
  const int dim = d_c + d_r;
  std::vector<float> xf(d_c), kf(d_r);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < n_new; ++i) {
      const long long pos = static_cast<long long>(positions[b]) + i;
      const long long slot = pos / page_size;
      if (pos < 0 || slot >= max_pages)
        throw InputError(what + ": position " + std::to_string(pos) + " of request " + std::to_string(b) +
                         " is outside [0, max_pages * page_size = " +
                         std::to_string(static_cast<long long>(max_pages) * page_size) + ")");
      const int page = page_table[static_cast<size_t>(b) * max_pages + slot];
      if (page < 0 || page >= num_pages)
        throw InputError(what + ": page_table[" + std::to_string(b) + "][" + std::to_string(slot) + "] = " +
                         std::to_string(page) + " is outside [0, num_pages = " + std::to_string(num_pages) + ")");
      const uint16_t* src = kv_new + (static_cast<size_t>(b) * n_new + i) * dim;
      for (int c = 0; c < d_c; ++c) xf[c] = bf16_to_float(src[c]);
      for (int c = 0; c < d_r; ++c) kf[c] = bf16_to_float(src[d_c + c]);
      write(cache + static_cast<size_t>(page) * page_bytes, static_cast<int>(pos % page_size), xf.data(), kf.data());
    }
}

void kv4_pages_to_bf16(int page_size, size_t page_bytes, int dim, const uint8_t* cache, int num_pages,
                       uint16_t* bf16_cache, const Kv4TokenReader& read) {
  for (int p = 0; p < num_pages; ++p)
    for (int t = 0; t < page_size; ++t)
      read(cache + static_cast<size_t>(p) * page_bytes, t,
           bf16_cache + (static_cast<size_t>(p) * page_size + t) * dim);
}

}  // namespace mla::quant
