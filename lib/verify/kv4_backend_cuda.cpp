// The 4-bit backend on the GPU: each rank's cache in FP4 or codebook pages on the device, the
// append kernel (queued BF16 rows encoded with the layer's parameters before the decode that
// needs them) and the 4-bit decode kernel (any head count, in blocks of 16 rows) on one stream. Layers calib.h5 protects keep a BF16
// cache (the BF16 append and decode kernels). Without CUDA the factory says so.
#include "core/error.hpp"
#include "verify/kv4_backend.hpp"

#if MLA_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "kernels/cache_append.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/kv4_append.hpp"
#include "kernels/kv4_decode.hpp"
#include "kernels/mla_decode.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"

namespace mla::verify {
namespace {

using cuda::check;
template <typename T>
using Buf = cuda::DeviceBuffer<T>;

class CudaKv4Backend final : public DecodeBackend {
 public:
  explicit CudaKv4Backend(transform::Kv4Params p) : p_(std::move(p)) {
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    flag_ = Buf<int>(1);
    check(cudaMemset(flag_.ptr, 0, sizeof(int)), "memset");
  }
  ~CudaKv4Backend() override { cudaStreamDestroy(stream_); }
  std::string name() const override {
    cudaDeviceProp prop{};
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    return "cuda " + p_.format + " (" + prop.name + ")";
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
    c.layer = layer_;
    c.page_table.upload(page_table);
    caches_.push_back(std::move(c));
    return static_cast<int>(caches_.size() - 1);
  }
  void append(int cache, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) override {
    caches_.at(cache).pending.push_back(Pending{kv_new, n_new, positions});
  }
  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    const bool bf16 = layer(c).protect_bf16;
    flush(c, d_c, d_r);
    const size_t n_out = size_t(c.shape.batch) * heads * d_c, n_lse = size_t(c.shape.batch) * heads;
    q_.upload(q);
    seqlens_.upload(seqlens);
    if (out_.count < n_out) out_ = Buf<uint16_t>(n_out);
    if (lse_.count < n_lse) lse_ = Buf<float>(n_lse);
    quant::Bf16DecodeParams p;
    p.q = q_.ptr;
    p.kv_cache = bf16 ? c.bf16.ptr : reinterpret_cast<const uint16_t*>(c.bytes.ptr);
    p.page_table = c.page_table.ptr;
    p.seqlens = seqlens_.ptr;
    p.out = out_.ptr;
    p.lse = lse_.ptr;
    p.batch = c.shape.batch;
    p.s_q = 1;
    p.heads = heads;
    p.d_c = d_c;
    p.d_r = d_r;
    p.num_pages = c.shape.num_pages;
    p.page_size = c.shape.page_size;
    p.max_pages = c.shape.max_pages;
    p.scale = scale;
    p.error_flag = flag_.ptr;
    if (bf16) {
      const size_t ws = kernels::decode_workspace_bytes_for(p);
      if (ws_.count < ws) ws_ = Buf<unsigned char>(ws);
      p.workspace = ws_.ptr;
      p.workspace_bytes = ws_.count;
      kernels::mla_decode_bf16(p, stream_);
    } else {
      kernels::Kv4DecodeParams kp;
      kp.base = p;
      kp.format = p_.format == "fp4" ? kernels::Kv4Format::Fp4 : kernels::Kv4Format::Codebook;
      std::copy(layer(c).codebook.levels, layer(c).codebook.levels + 16, kp.levels);
      const size_t ws = kernels::kv4_decode_workspace_bytes_for(kp);
      if (ws_.count < ws) ws_ = Buf<unsigned char>(ws);
      kp.base.workspace = ws_.ptr;
      kp.base.workspace_bytes = ws_.count;
      kernels::mla_decode_kv4(kp, stream_);
    }
    check(cudaStreamSynchronize(stream_), "4-bit decode");
    check_flag("decode");
    out_.download(out, n_out);
    lse_.download(lse, n_lse);
  }

 private:
  struct Pending {
    std::vector<uint16_t> kv_new;
    int n_new;
    std::vector<int32_t> positions;
  };
  struct Cache {
    CacheShape shape;
    int64_t layer = 0;
    Buf<int32_t> page_table;
    Buf<uint8_t> bytes;   // 4-bit pages
    Buf<uint16_t> bf16;   // a protected layer's BF16 cache
    std::vector<Pending> pending;
    int d_c = 0;
  };
  const transform::Kv4LayerParams& layer(const Cache& c) const { return p_.layers.at(static_cast<size_t>(c.layer)); }

  // Allocates the cache on first use (d_c known now) and appends the queued rows.
  void flush(Cache& c, int d_c, int d_r) {
    if (d_c + d_r != c.shape.dim)
      throw InputError(p_.format + " backend: d_c + d_r = " + std::to_string(d_c + d_r) + " differs from the cache's dim " +
                       std::to_string(c.shape.dim));
    const transform::Kv4LayerParams& L = layer(c);
    if (c.d_c == 0) {
      c.d_c = d_c;
      if (L.protect_bf16) {
        c.bf16 = Buf<uint16_t>(size_t(c.shape.num_pages) * c.shape.page_size * c.shape.dim);
        check(cudaMemset(c.bf16.ptr, 0xFF, c.bf16.bytes()), "poison cache");  // NaN until written
      } else {
        size_t page_bytes = 0;
        if (p_.format == "fp4") {
          const quant::Fp4CacheLayout l{c.shape.page_size, d_c, d_r};
          quant::validate_fp4_layout(l);
          page_bytes = l.page_bytes();
        } else {
          const quant::CodebookCacheLayout l{c.shape.page_size, d_c, d_r};
          quant::validate_codebook_layout(l);
          page_bytes = l.page_bytes();
        }
        c.bytes = Buf<uint8_t>(size_t(c.shape.num_pages) * page_bytes);
        check(cudaMemset(c.bytes.ptr, 0xFF, c.bytes.count), "poison cache");  // NaN scales until written
      }
    } else if (c.d_c != d_c) {
      throw InputError(p_.format + " backend: d_c = " + std::to_string(d_c) + " differs from the cache's " +
                       std::to_string(c.d_c));
    }
    for (const Pending& a : c.pending) {
      kv_.upload(a.kv_new);
      pos_.upload(a.positions);
      if (L.protect_bf16) {
        kernels::CacheAppendParams p;
        p.kv_new = kv_.ptr;
        p.positions = pos_.ptr;
        p.page_table = c.page_table.ptr;
        p.kv_cache = c.bf16.ptr;
        p.error_flag = flag_.ptr;
        p.batch = c.shape.batch;
        p.n_new = a.n_new;
        p.dim = c.shape.dim;
        p.max_pages = c.shape.max_pages;
        p.num_pages = c.shape.num_pages;
        p.page_size = c.shape.page_size;
        kernels::cache_append_bf16(p, stream_);
      } else {
        if (p_.format == "fp4" && L.fp4.rule != quant::Fp4ScaleRule::Round)
          throw InputError("--kv fp4 --device cuda: the GPU append implements the round scale rule (--fp4-rule " +
                           std::string(quant::fp4_rule_name(L.fp4.rule)) + " is a CPU study: use --device cpu)");
        kernels::Kv4AppendParams p;
        p.kv_new = kv_.ptr;
        p.positions = pos_.ptr;
        p.page_table = c.page_table.ptr;
        p.cache = c.bytes.ptr;
        p.error_flag = flag_.ptr;
        p.batch = c.shape.batch;
        p.n_new = a.n_new;
        p.d_c = d_c;
        p.d_r = d_r;
        p.max_pages = c.shape.max_pages;
        p.num_pages = c.shape.num_pages;
        p.page_size = c.shape.page_size;
        p.format = p_.format == "fp4" ? kernels::Kv4Format::Fp4 : kernels::Kv4Format::Codebook;
        p.c = L.fp4.c;
        std::copy(L.codebook.levels, L.codebook.levels + 16, p.levels);
        kernels::kv4_cache_append(p, stream_);
      }
      check(cudaStreamSynchronize(stream_), "4-bit cache append");
      check_flag("cache append");
    }
    c.pending.clear();
  }
  void check_flag(const char* what) {
    std::vector<int> f;
    flag_.download(f, 1);
    if (f[0] != 0)
      throw Error(p_.format + " " + what + ": kernel reported a bad page id or position (error flag " +
                  std::to_string(f[0]) + ")");
  }
  transform::Kv4Params p_;
  int64_t layer_ = 0;
  cudaStream_t stream_{};
  std::vector<Cache> caches_;
  Buf<uint16_t> kv_, q_, out_;
  Buf<int32_t> pos_, seqlens_;
  Buf<float> lse_;
  Buf<unsigned char> ws_;
  Buf<int> flag_;
};

}  // namespace

std::unique_ptr<DecodeBackend> make_cuda_kv4_backend(const transform::Kv4Params& params) {
  if (!transform::is_kv4_format(params.format))
    throw InputError("4-bit backend: format must be fp4 or codebook, got '" + params.format + "'");
  if (!cuda_backend_available()) throw Error("--device cuda: no CUDA device is present (use --device cpu)");
  return std::make_unique<CudaKv4Backend>(params);
}

}  // namespace mla::verify

#else

namespace mla::verify {
std::unique_ptr<DecodeBackend> make_cuda_kv4_backend(const transform::Kv4Params& params) {
  throw Error("--kv " + params.format +
              " --device cuda: this build has no CUDA (configure with MLA_ENABLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace mla::verify

#endif
