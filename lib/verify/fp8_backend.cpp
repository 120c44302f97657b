#include "verify/fp8_backend.hpp"

#include <algorithm>
#include <cstring>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#include "quant/decode_twin_bf16.hpp"
#include "quant/fp8_cache_format.hpp"
#include "quant/fp8_kv.hpp"
#include "transform/kv4_params.hpp"
#include "verify/backend_common.hpp"
#include "verify/kv4_backend.hpp"

namespace mla::verify {
namespace {

struct Fp8Cache {
  CacheShape shape;
  std::vector<int32_t> page_table;
  std::vector<PendingAppend> pending;
  std::vector<uint8_t> bytes;  // FP8 pages (0xFF: NaN codes and NaN scales until written)
  int d_c, d_r;
};

class CpuFp8Backend final : public QueuedAppendBackend<Fp8Cache> {
  using Cache = Fp8Cache;

 public:
  std::string name() const override { return "cpu (fp8 twin)"; }

  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    return caches_.add(Cache{s, page_table, {}, {}, 0, 0});
  }
  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    flush(c, d_c, d_r);
    decode_fp8_twin(c.shape, c.bytes.data(), c.page_table, q, heads, d_c, d_r, seqlens, scale, out, lse);
  }

 private:
  static void flush(Cache& c, int d_c, int d_r) {
    check_cache_dim("fp8", c.shape, d_c, d_r);
    const quant::Fp8CacheLayout l{c.shape.page_size, d_c, d_r};
    if (c.bytes.empty()) {
      quant::validate_fp8_layout(l);
      c.bytes.assign(static_cast<size_t>(c.shape.num_pages) * l.page_bytes(), 0xFF);
      c.d_c = d_c;
      c.d_r = d_r;
    } else {
      check_cache_d_c("fp8", c.d_c, d_c);
    }
    for (const PendingAppend& a : c.pending)
      quant::fp8_cache_append_twin(l, a.kv_new.data(), c.shape.batch, a.n_new, a.positions.data(), c.page_table.data(),
                                   c.shape.max_pages, c.bytes.data(), c.shape.num_pages);
    c.pending.clear();
  }
};

// SnapMLA study configuration: the BF16 cache fake-quantised per request, decoded by the BF16 twin.
class StudyBackend final : public DecodeBackend {
 public:
  explicit StudyBackend(quant::Fp8Config config) : config_(config) {}
  std::string name() const override {
    return std::string("cpu (bf16 twin on a cache fake-quantised as ") + std::string(quant::fp8_config_name(config_)) + ")";
  }
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
    const int P = c.shape.page_size, dim = c.shape.dim;
    // The same pages with every request's first seqlens[b] tokens replaced by their
    // quantised-dequantised values (rounded to bf16: 2^-9 relative, far below E4M3's 2^-4).
    std::vector<uint16_t> fq = c.data;
    for (int b = 0; b < c.shape.batch; ++b) {
      const int L = seqlens[b];
      if (L == 0) continue;
      auto row = [&](std::vector<uint16_t>& v, int t) {
        const int page = c.page_table[static_cast<size_t>(b) * c.shape.max_pages + t / P];
        return v.data() + (static_cast<size_t>(page) * P + t % P) * dim;
      };
      MatrixR x(L, d_c), k(L, d_r), xo, ko;
      for (int t = 0; t < L; ++t) {
        const uint16_t* r = row(fq, t);
        for (int i = 0; i < d_c; ++i) x(t, i) = bf16_to_float(r[i]);
        for (int i = 0; i < d_r; ++i) k(t, i) = bf16_to_float(r[d_c + i]);
      }
      quant::fake_quant_fp8_cache(config_, x, k, xo, ko);
      for (int t = 0; t < L; ++t) {
        uint16_t* r = row(fq, t);
        for (int i = 0; i < d_c; ++i) r[i] = double_to_bf16(xo(t, i));
        for (int i = 0; i < d_r; ++i) r[d_c + i] = double_to_bf16(ko(t, i));
      }
    }
    decode_bf16_twin(c.shape, fq.data(), c.page_table, q, heads, d_c, d_r, seqlens, scale, out, lse);
  }

 private:
  struct Cache {
    CacheShape shape;
    std::vector<int32_t> page_table;
    std::vector<uint16_t> data;
  };
  quant::Fp8Config config_;
  CacheList<Cache> caches_;
};

}  // namespace

const std::vector<std::string>& kv_format_names() {
  static const std::vector<std::string> n = {"bf16", "fp8", "fp4", "codebook", "fp8-rope-aware", "fp8-A", "fp8-B", "fp8-C", "fp8-D"};
  return n;
}

double kv_kernel_tolerance(const std::string& kv, double user_bound, const std::string& kv4_route) {
  if (kv == "bf16") return user_bound;
  if (!transform::is_kv4_format(kv)) return std::max(user_bound, kFp8KernelRelL2);
  const bool fp8 = parse_kv4_route(kv4_route) == Kv4Route::Fp8;
  return std::max(user_bound, fp8 ? kKv4Fp8RouteKernelRelL2 : kKv4KernelRelL2);
}

double kv_cos_tolerance(const std::string& kv, double user_bound, const std::string& kv4_route) {
  if (kv == "bf16") return user_bound;
  if (!transform::is_kv4_format(kv)) return std::max(user_bound, kFp8CosDiff);
  const bool fp8 = parse_kv4_route(kv4_route) == Kv4Route::Fp8;
  return std::max(user_bound, fp8 ? kKv4Fp8RouteCosDiff : kKv4CosDiff);
}

std::unique_ptr<DecodeBackend> make_kv_backend(const std::string& device, const std::string& kv,
                                               const transform::Kv4Params* kv4, const std::string& kv4_route) {
  if (device != "cpu" && device != "cuda") throw InputError("--device must be cpu or cuda, got '" + device + "'");
  const Kv4Route route = checked_kv4_route(kv, kv4_route);
  if (kv == "bf16") return device == "cuda" ? make_cuda_backend() : make_cpu_backend();
  if (transform::is_kv4_format(kv)) {
    if (!kv4 || kv4->format != kv)
      throw InputError("--kv " + kv + " needs its per-layer parameters: pass --calib calib.h5 (mla-calibrate's fits)");
    return device == "cuda" ? make_cuda_kv4_backend(*kv4, route) : make_cpu_kv4_backend(*kv4, route);
  }
  if (kv == "fp8") return device == "cuda" ? make_cuda_fp8_backend() : std::make_unique<CpuFp8Backend>();
  const std::pair<const char*, quant::Fp8Config> study[] = {{"fp8-rope-aware", quant::Fp8Config::RopeAware},
                                                            {"fp8-A", quant::Fp8Config::A},
                                                            {"fp8-B", quant::Fp8Config::B},
                                                            {"fp8-C", quant::Fp8Config::C},
                                                            {"fp8-D", quant::Fp8Config::D}};
  for (const auto& [name, cfg] : study)
    if (kv == name) {
      if (device != "cpu")
        throw InputError("--kv " + kv + ": the study configurations run on the CPU twin only (use --device cpu)");
      return std::make_unique<StudyBackend>(cfg);
    }
  std::string all;
  for (const auto& n : kv_format_names()) all += (all.empty() ? "" : ", ") + n;
  throw InputError("--kv: unknown format '" + kv + "' (one of: " + all + ")");
}

}  // namespace mla::verify
