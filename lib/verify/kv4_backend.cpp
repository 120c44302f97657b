#include "verify/kv4_backend.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"
#include "verify/backend_common.hpp"

namespace mla::verify {
namespace {

// The format-specific steps of the CPU flush, by layout: the append twin with the layer's
// parameters, and one slot dequantised to a BF16 row.
void append_twin(const quant::Fp4CacheLayout& l, const transform::Kv4LayerParams& L, const CacheShape& s,
                 const std::vector<int32_t>& page_table, const PendingAppend& a, std::vector<uint8_t>& bytes) {
  quant::fp4_cache_append_twin(l, L.fp4, a.kv_new.data(), s.batch, a.n_new, a.positions.data(), page_table.data(),
                               s.max_pages, bytes.data(), s.num_pages);
}
void append_twin(const quant::CodebookCacheLayout& l, const transform::Kv4LayerParams& L, const CacheShape& s,
                 const std::vector<int32_t>& page_table, const PendingAppend& a, std::vector<uint8_t>& bytes) {
  quant::codebook_cache_append_twin(l, L.codebook, a.kv_new.data(), s.batch, a.n_new, a.positions.data(),
                                    page_table.data(), s.max_pages, bytes.data(), s.num_pages);
}
void dequant_token(const quant::Fp4CacheLayout& l, const transform::Kv4LayerParams&, const uint8_t* page, int t,
                   uint16_t* row) {
  quant::dequant_fp4_token_bf16(l, page, t, row);
}
void dequant_token(const quant::CodebookCacheLayout& l, const transform::Kv4LayerParams& L, const uint8_t* page, int t,
                   uint16_t* row) {
  quant::dequant_codebook_token_bf16(l, L.codebook, page, t, row);
}

struct Kv4Cache {
  CacheShape shape;
  std::vector<int32_t> page_table;
  int64_t layer = 0;
  std::vector<PendingAppend> pending;
  std::vector<uint8_t> bytes;   // 4-bit pages (0xFF until written: NaN scales, a poisoned token)
  std::vector<uint16_t> bf16;   // the pages dequantised (or, protected, the BF16 cache itself)
  int d_c = 0;
};

class CpuKv4Backend final : public Kv4BackendBase<Kv4Cache> {
  using Cache = Kv4Cache;

 public:
  using Kv4BackendBase::Kv4BackendBase;
  std::string name() const override {
    return "cpu (" + p_.format + " twin: append twin, BF16 dequantisation, bf16 decode twin)";
  }
  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c;
    c.shape = s;
    c.page_table = page_table;
    c.layer = layer_;
    return caches_.add(std::move(c));
  }
  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    flush(c, d_c, d_r);
    decode_bf16_twin(c.shape, c.bf16.data(), c.page_table, q, heads, d_c, d_r, seqlens, scale, out, lse);
  }

 private:
  // Encodes the queued rows with the layer's parameters (d_c known now) and refreshes the BF16 view.
  void flush(Cache& c, int d_c, int d_r) {
    check_cache_dim(p_.format, c.shape, d_c, d_r);
    const transform::Kv4LayerParams& L = layer_params(c);
    if (c.bf16.empty()) c.bf16 = poisoned_bf16_pages(c.shape);  // NaN until written, as the BF16 backend
    if (c.d_c == 0) c.d_c = d_c;
    check_cache_d_c(p_.format, c.d_c, d_c);
    if (c.pending.empty()) return;
    if (L.protect_bf16) {
      for (const PendingAppend& a : c.pending)
        append_bf16_twin(c.shape, c.page_table, c.bf16, a.kv_new.data(), a.n_new, a.positions.data());
    } else if (p_.format == "fp4") {
      encode(c, quant::Fp4CacheLayout{c.shape.page_size, d_c, d_r}, L);
    } else {
      encode(c, quant::CodebookCacheLayout{c.shape.page_size, d_c, d_r}, L);
    }
    c.pending.clear();
  }

  // Encode (the append twin: every byte the GPU writes), then dequantise the written slots into
  // the BF16 view (the rows quant::fp4_cache_to_bf16 / codebook_cache_to_bf16 give for them;
  // slots never written stay NaN and are never read: they lie past every seqlen).
  template <typename Layout>
  void encode(Cache& c, const Layout& l, const transform::Kv4LayerParams& L) {
    const int P = c.shape.page_size;
    const size_t page_bytes = kv4_page_bytes(p_.format, P, l.d_c, l.d_r);
    if (c.bytes.empty()) c.bytes.assign(size_t(c.shape.num_pages) * page_bytes, 0xFF);
    for (const PendingAppend& a : c.pending) append_twin(l, L, c.shape, c.page_table, a, c.bytes);
    for (const PendingAppend& a : c.pending)
      for (int b = 0; b < c.shape.batch; ++b)
        for (int i = 0; i < a.n_new; ++i) {
          const int pos = a.positions[b] + i;  // in range: the append twin checked it
          const int page = c.page_table[size_t(b) * c.shape.max_pages + pos / P];
          dequant_token(l, L, c.bytes.data() + size_t(page) * page_bytes, pos % P,
                        c.bf16.data() + (size_t(page) * P + pos % P) * c.shape.dim);
        }
  }
};

}  // namespace

std::unique_ptr<DecodeBackend> make_cpu_kv4_backend(const transform::Kv4Params& params) {
  check_kv4_format(params);
  return std::make_unique<CpuKv4Backend>(params);
}

}  // namespace mla::verify
