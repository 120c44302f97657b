#include "verify/kv4_backend.hpp"

#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/decode_twin_bf16.hpp"
#include "quant/fp4_cache_format.hpp"

namespace mla::verify {
namespace {

struct PendingAppend {
  std::vector<uint16_t> kv_new;
  int n_new = 0;
  std::vector<int32_t> positions;
};

class CpuKv4Backend final : public DecodeBackend {
 public:
  explicit CpuKv4Backend(transform::Kv4Params p) : p_(std::move(p)) {}
  std::string name() const override {
    return "cpu (" + p_.format + " twin: append twin, BF16 dequantisation, bf16 decode twin)";
  }
  void begin_layer(int64_t layer) override {
    if (layer < 0 || layer >= static_cast<int64_t>(p_.layers.size()))
      throw InputError("--kv " + p_.format + ": layer " + std::to_string(layer) + " has no parameters in " + p_.calib +
                       " (" + std::to_string(p_.layers.size()) + " layers)");
    layer_ = layer;
  }
  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c;
    c.shape = s;
    c.page_table = page_table;
    c.layer = layer_;
    caches_.push_back(std::move(c));
    return static_cast<int>(caches_.size() - 1);
  }
  void append(int cache, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) override {
    caches_.at(cache).pending.push_back(PendingAppend{kv_new, n_new, positions});
  }
  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    flush(c, d_c, d_r);
    out.assign(size_t(c.shape.batch) * heads * d_c, 0);
    lse.assign(size_t(c.shape.batch) * heads, 0.f);
    quant::Bf16DecodeParams p = decode_params(c.shape, heads, d_c, d_r, scale);
    p.q = q.data();
    p.kv_cache = c.bf16.data();
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
    int64_t layer = 0;
    std::vector<PendingAppend> pending;
    std::vector<uint8_t> bytes;   // 4-bit pages (0xFF until written: NaN scales, a poisoned token)
    std::vector<uint16_t> bf16;   // the pages dequantised (or, protected, the BF16 cache itself)
    int d_c = 0;
  };

  // Encodes the queued rows with the layer's parameters (d_c known now) and refreshes the BF16 view.
  void flush(Cache& c, int d_c, int d_r) {
    if (d_c + d_r != c.shape.dim)
      throw InputError(p_.format + " backend: d_c + d_r = " + std::to_string(d_c + d_r) + " differs from the cache's dim " +
                       std::to_string(c.shape.dim));
    const transform::Kv4LayerParams& L = p_.layers.at(static_cast<size_t>(c.layer));
    const size_t n_bf16 = size_t(c.shape.num_pages) * c.shape.page_size * c.shape.dim;
    if (c.bf16.empty()) c.bf16.assign(n_bf16, 0x7FC0);  // NaN until written, as the BF16 backend
    if (c.d_c == 0) c.d_c = d_c;
    if (c.d_c != d_c)
      throw InputError(p_.format + " backend: d_c = " + std::to_string(d_c) + " differs from the cache's " +
                       std::to_string(c.d_c));
    if (c.pending.empty()) return;
    if (L.protect_bf16) {
      for (const PendingAppend& a : c.pending)
        quant::cache_append_twin_bf16(a.kv_new.data(), c.shape.batch, a.n_new, c.shape.dim, a.positions.data(),
                                      c.page_table.data(), c.shape.max_pages, c.bf16.data(), c.shape.num_pages,
                                      c.shape.page_size);
      c.pending.clear();
      return;
    }
    // Encode (the append twin: every byte the GPU writes), then dequantise the written slots
    // into the BF16 view (the rows quant::fp4_cache_to_bf16 / codebook_cache_to_bf16 give for
    // them; slots never written stay NaN and are never read: they lie past every seqlen).
    const int P = c.shape.page_size;
    std::function<void(const uint8_t*, int, uint16_t*)> read;
    size_t page_bytes = 0;
    if (p_.format == "fp4") {
      const quant::Fp4CacheLayout l{P, d_c, d_r};
      quant::validate_fp4_layout(l);
      page_bytes = l.page_bytes();
      if (c.bytes.empty()) c.bytes.assign(size_t(c.shape.num_pages) * page_bytes, 0xFF);
      for (const PendingAppend& a : c.pending)
        quant::fp4_cache_append_twin(l, L.fp4, a.kv_new.data(), c.shape.batch, a.n_new, a.positions.data(),
                                     c.page_table.data(), c.shape.max_pages, c.bytes.data(), c.shape.num_pages);
      read = [l](const uint8_t* page, int t, uint16_t* row) { quant::dequant_fp4_token_bf16(l, page, t, row); };
    } else {
      const quant::CodebookCacheLayout l{P, d_c, d_r};
      quant::validate_codebook_layout(l);
      page_bytes = l.page_bytes();
      if (c.bytes.empty()) c.bytes.assign(size_t(c.shape.num_pages) * page_bytes, 0xFF);
      for (const PendingAppend& a : c.pending)
        quant::codebook_cache_append_twin(l, L.codebook, a.kv_new.data(), c.shape.batch, a.n_new, a.positions.data(),
                                          c.page_table.data(), c.shape.max_pages, c.bytes.data(), c.shape.num_pages);
      const quant::CodebookTable tab = L.codebook;
      read = [l, tab](const uint8_t* page, int t, uint16_t* row) {
        quant::dequant_codebook_token_bf16(l, tab, page, t, row);
      };
    }
    for (const PendingAppend& a : c.pending)
      for (int b = 0; b < c.shape.batch; ++b)
        for (int i = 0; i < a.n_new; ++i) {
          const int pos = a.positions[b] + i;  // in range: the append twin checked it
          const int page = c.page_table[size_t(b) * c.shape.max_pages + pos / P];
          read(c.bytes.data() + size_t(page) * page_bytes, pos % P,
               c.bf16.data() + (size_t(page) * P + pos % P) * c.shape.dim);
        }
    c.pending.clear();
  }

  transform::Kv4Params p_;
  int64_t layer_ = 0;
  std::vector<Cache> caches_;
};

}  // namespace

std::unique_ptr<DecodeBackend> make_cpu_kv4_backend(const transform::Kv4Params& params) {
  if (!transform::is_kv4_format(params.format))
    throw InputError("4-bit backend: format must be fp4 or codebook, got '" + params.format + "'");
  return std::make_unique<CpuKv4Backend>(params);
}

}  // namespace mla::verify
