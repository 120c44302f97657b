#include "verify/kv4_backend.hpp"

#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"
#include "quant/fp4_to_fp8.hpp"
#include "quant/fp8_cache_layout.hpp"
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
  std::vector<uint16_t> bf16;   // bf16 route: the pages dequantised (or, protected, the BF16 cache itself)
  std::vector<uint8_t> fp8;     // fp8 route: the written pages converted to FP8 pages (same ids)
  int d_c = 0;
};

class CpuKv4Backend final : public Kv4BackendBase<Kv4Cache> {
  using Cache = Kv4Cache;

 public:
  CpuKv4Backend(transform::Kv4Params p, Kv4Route route) : Kv4BackendBase(std::move(p)), route_(route) {}
  std::string name() const override {
    return route_ == Kv4Route::Fp8
               ? "cpu (" + p_.format + " twin, fp8 route: append twin, fp4_cache_to_fp8, fp8 decode twin)"
               : "cpu (" + p_.format + " twin, bf16 route: append twin, BF16 dequantisation, bf16 decode twin)";
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
    const bool fp8 = route_ == Kv4Route::Fp8 && !layer_params(c).protect_bf16;
    if (fp8) check_kv4_fp8_route_shape(heads, d_c, d_r, c.shape.page_size);
    flush(c, d_c, d_r);
    if (fp8) decode_fp8_twin(c.shape, c.fp8.data(), c.page_table, q, heads, d_c, d_r, seqlens, scale, out, lse);
    else decode_bf16_twin(c.shape, c.bf16.data(), c.page_table, q, heads, d_c, d_r, seqlens, scale, out, lse);
  }

 private:
  // Encodes the queued rows with the layer's parameters (d_c known now) and refreshes the route's view.
  void flush(Cache& c, int d_c, int d_r) {
    check_cache_dim(p_.format, c.shape, d_c, d_r);
    const transform::Kv4LayerParams& L = layer_params(c);
    const bool fp8 = route_ == Kv4Route::Fp8 && !L.protect_bf16;
    if (c.bf16.empty() && !fp8) c.bf16 = poisoned_bf16_pages(c.shape);  // NaN until written, as the BF16 backend
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

  // Encode (the append twin: every byte the GPU writes), then refresh the route's view of the
  // written slots: bf16, each slot dequantised into the BF16 view (the rows quant::fp4_cache_to_bf16
  // / codebook_cache_to_bf16 give for them; slots never written stay NaN and are never read: they
  // lie past every seqlen); fp8, each written page converted (quant::fp4_cache_to_fp8, what the GPU
  // route does per tile in shared memory; unwritten slots become FP8 poisoned tokens, also unread).
  template <typename Layout>
  void encode(Cache& c, const Layout& l, const transform::Kv4LayerParams& L) {
    const int P = c.shape.page_size;
    const size_t page_bytes = kv4_page_bytes(p_.format, P, l.d_c, l.d_r);
    if (c.bytes.empty()) c.bytes.assign(size_t(c.shape.num_pages) * page_bytes, 0xFF);
    for (const PendingAppend& a : c.pending) append_twin(l, L, c.shape, c.page_table, a, c.bytes);
    std::vector<bool> written(c.shape.num_pages, false);
    for (const PendingAppend& a : c.pending)
      for (int b = 0; b < c.shape.batch; ++b)
        for (int i = 0; i < a.n_new; ++i) {
          const int pos = a.positions[b] + i;  // in range: the append twin checked it
          const int page = c.page_table[size_t(b) * c.shape.max_pages + pos / P];
          written[page] = true;
          if (route_ == Kv4Route::Bf16)
            dequant_token(l, L, c.bytes.data() + size_t(page) * page_bytes, pos % P,
                          c.bf16.data() + (size_t(page) * P + pos % P) * c.shape.dim);
        }
    if (route_ == Kv4Route::Fp8) convert_to_fp8(c, l, written);
  }
  // The fp8 route (FP4 only: check_kv4_route refused the codebook).
  void convert_to_fp8(Cache& c, const quant::Fp4CacheLayout& l, const std::vector<bool>& written) {
    const size_t fp8_page = quant::Fp8CacheLayout{l.page_size, l.d_c, l.d_r}.page_bytes();
    if (c.fp8.empty()) c.fp8.assign(size_t(c.shape.num_pages) * fp8_page, 0xFF);  // NaN scales until written
    for (int pg = 0; pg < c.shape.num_pages; ++pg)
      if (written[pg])
        quant::fp4_cache_to_fp8(l, c.bytes.data() + size_t(pg) * l.page_bytes(), 1, c.fp8.data() + size_t(pg) * fp8_page);
  }
  void convert_to_fp8(Cache&, const quant::CodebookCacheLayout&, const std::vector<bool>&) {
    throw InputError("--kv codebook: no FP8 route");  // unreachable: check_kv4_route refused it
  }

  Kv4Route route_;
};

}  // namespace

const std::vector<std::string>& kv4_route_names() {
  static const std::vector<std::string> n = {"bf16", "fp8"};
  return n;
}

Kv4Route parse_kv4_route(const std::string& name) {
  if (name == "bf16") return Kv4Route::Bf16;
  if (name == "fp8") return Kv4Route::Fp8;
  throw InputError("--kv4-route: unknown route '" + name + "' (one of: bf16, fp8)");
}

const char* kv4_route_name(Kv4Route route) { return route == Kv4Route::Fp8 ? "fp8" : "bf16"; }

std::unique_ptr<DecodeBackend> make_cpu_kv4_backend(const transform::Kv4Params& params, Kv4Route route) {
  check_kv4_format(params);
  check_kv4_route(params.format, route);
  return std::make_unique<CpuKv4Backend>(params, route);
}

}  // namespace mla::verify
