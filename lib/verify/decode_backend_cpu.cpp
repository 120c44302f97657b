#include "verify/backend_common.hpp"
#include "verify/decode_backend.hpp"

namespace mla::verify {
namespace {

class CpuBackend final : public DecodeBackend {
 public:
  std::string name() const override { return "cpu (twin)"; }

  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    return caches_.add(Cache{s, page_table, poisoned_bf16_pages(s)});
  }

  void append(int cache, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) override {
    Cache& c = caches_.at(cache);
    append_bf16_twin(c.shape, c.page_table, c.data, kv_new.data(), n_new, positions.data());
  }

  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    const Cache& c = caches_.at(cache);
    decode_bf16_twin(c.shape, c.data.data(), c.page_table, q, heads, d_c, d_r, seqlens, scale, out, lse);
  }

 private:
  struct Cache {
    CacheShape shape;
    std::vector<int32_t> page_table;
    std::vector<uint16_t> data;
  };
  CacheList<Cache> caches_;
};

}  // namespace

std::unique_ptr<DecodeBackend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mla::verify
