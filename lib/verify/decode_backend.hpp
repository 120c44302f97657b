#pragma once
// Where verify-decode runs the absorbed decode of each TPLA rank: the CUDA kernels
// (kernels/mla_decode.hpp, kernels/cache_append.hpp) or their CPU twins
// (quant/decode_twin_bf16.hpp). Both take the same bf16 buffers, so the driver is one code path.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quant/decode_twin_bf16.hpp"

namespace mla::verify {

// One paged latent cache: [num_pages, page_size, dim] bf16 with its page table [batch, max_pages].
struct CacheShape {
  int batch = 0;
  int num_pages = 0;
  int page_size = 64;
  int max_pages = 0;
  int dim = 0;  // d_c (of the rank's slice) + d_r
};

// The decode parameter block for one s_q = 1 step on a cache of this shape (pointers unset);
// also the FP8 decode's (quant::Fp8DecodeParams has the same shape fields).
template <typename Params = quant::Bf16DecodeParams>
Params decode_params(const CacheShape& s, int heads, int d_c, int d_r, float scale) {
  Params p;
  quant::set_decode_shape(p, s.batch, 1, heads, d_c, d_r, s.num_pages, s.page_size, s.max_pages, scale);
  return p;
}

class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;
  virtual std::string name() const = 0;
  // The layer whose caches the next create_cache calls make (formats with per-layer
  // parameters, verify/kv4_backend.hpp, read it; the others ignore it).
  virtual void begin_layer(int64_t /*layer*/) {}
  // Creates a cache (contents poisoned: NaN bits) and returns its handle.
  virtual int create_cache(const CacheShape& shape, const std::vector<int32_t>& page_table) = 0;
  // Writes kv_new [batch, n_new, dim] (bf16 bits) at positions[b] .. positions[b] + n_new - 1.
  virtual void append(int cache, const std::vector<uint16_t>& kv_new, int n_new,
                      const std::vector<int32_t>& positions) = 0;
  // One decode step (s_q = 1): q [batch, 1, heads, d_c + d_r] bf16 bits against the first
  // seqlens[b] tokens of the cache; out [batch, 1, heads, d_c] bf16 bits, lse [batch, 1, heads].
  virtual void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r,
                      const std::vector<int32_t>& seqlens, float scale, std::vector<uint16_t>& out,
                      std::vector<float>& lse) = 0;
};

std::unique_ptr<DecodeBackend> make_cpu_backend();
// Throws mla::Error when the build has no CUDA or no device is present.
std::unique_ptr<DecodeBackend> make_cuda_backend();
bool cuda_backend_available();

}  // namespace mla::verify
