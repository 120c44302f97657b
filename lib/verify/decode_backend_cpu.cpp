#include <cstring>

#include "quant/decode_twin_bf16.hpp"
#include "verify/decode_backend.hpp"

namespace mla::verify {
namespace {

class CpuBackend final : public DecodeBackend {
 public:
  std::string name() const override { return "cpu (twin)"; }

  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c{s, page_table, std::vector<uint16_t>(size_t(s.num_pages) * s.page_size * s.dim, 0x7FC0)};
    caches_.push_back(std::move(c));
    return static_cast<int>(caches_.size() - 1);
  }

  void append(int cache, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) override {
    Cache& c = caches_.at(cache);
    quant::cache_append_twin_bf16(kv_new.data(), c.shape.batch, n_new, c.shape.dim, positions.data(),
                                  c.page_table.data(), c.shape.max_pages, c.data.data(), c.shape.num_pages,
                                  c.shape.page_size);
  }

  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    out.assign(size_t(c.shape.batch) * heads * d_c, 0);
    lse.assign(size_t(c.shape.batch) * heads, 0.f);
    quant::Bf16DecodeParams p = decode_params(c.shape, heads, d_c, d_r, scale);
    p.q = q.data();
    p.kv_cache = c.data.data();
    p.page_table = c.page_table.data();
    p.seqlens = seqlens.data();
    p.out = out.data();
    p.lse = lse.data();
    quant::decode_twin_bf16(p);
  }

 private:
  struct Cache {
    CacheShape shape;
    std::vector<int32_t> page_table;
    std::vector<uint16_t> data;
  };
  std::vector<Cache> caches_;
};

}  // namespace

std::unique_ptr<DecodeBackend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mla::verify
