// The 4-bit backend on the GPU: each rank's cache in FP4 or codebook pages on the device, the
// append kernel (queued BF16 rows encoded with the layer's parameters before the decode that
// needs them) and, on one stream, the route's decode kernel: bf16, the 4-bit decode kernel (any
// head count, in blocks of 16 rows); fp8 (FP4 only), the FP8 decode of the FP4 pages converted
// per tile in shared memory, the query quantised inside (fp8_decode_fp4_cache_bf16q). Layers
// calib.h5 protects keep a BF16 cache (the BF16 append and decode kernels). Without CUDA the
// factory says so.
#include "core/error.hpp"
#include "verify/backend_common.hpp"
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
#include "quant/fp4_cache_format.hpp"

namespace mla::verify {
namespace {

kernels::Kv4Format kernel_format(const std::string& format) {
  return format == "fp4" ? kernels::Kv4Format::Fp4 : kernels::Kv4Format::Codebook;
}

struct Kv4Cache {
  CacheShape shape;
  int64_t layer = 0;
  cuda::DeviceBuffer<int32_t> page_table;
  cuda::DeviceBuffer<uint8_t> bytes;   // 4-bit pages
  cuda::DeviceBuffer<uint16_t> bf16;   // a protected layer's BF16 cache
  std::vector<PendingAppend> pending;
  int d_c = 0;
};

class CudaKv4Backend final : public Kv4BackendBase<Kv4Cache> {
  using Cache = Kv4Cache;

 public:
  CudaKv4Backend(transform::Kv4Params p, Kv4Route route) : Kv4BackendBase(std::move(p)), route_(route) {}
  std::string name() const override {
    return "cuda " + p_.format + ", " + kv4_route_name(route_) + " route (" + cuda_device_name() + ")";
  }
  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c;
    c.shape = s;
    c.layer = layer_;
    c.page_table.upload(page_table);
    return caches_.add(std::move(c));
  }
  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    const bool bf16 = layer_params(c).protect_bf16;
    const bool fp8 = route_ == Kv4Route::Fp8 && !bf16;
    if (fp8) check_kv4_fp8_route_shape(heads, d_c, d_r, c.shape.page_size);
    flush(c, d_c, d_r);
    if (fp8) {
      decode_fp8_cuda(step_, c.shape, c.bytes.ptr, c.page_table.ptr, /*fp4_pages=*/true, q, heads, d_c, d_r, seqlens,
                      scale, out, lse, "fp4 decode (fp8 route)");
      return;
    }
    const size_t n_out = size_t(c.shape.batch) * heads * d_c, n_lse = size_t(c.shape.batch) * heads;
    step_.upload_decode(q, seqlens, n_out, n_lse);
    quant::Bf16DecodeParams p = decode_params(c.shape, heads, d_c, d_r, scale);
    p.q = step_.q();
    p.kv_cache = bf16 ? c.bf16.ptr : reinterpret_cast<const uint16_t*>(c.bytes.ptr);
    p.page_table = c.page_table.ptr;
    step_.set_decode_buffers(p);
    if (bf16) {
      p.workspace = step_.workspace(kernels::decode_workspace_bytes_for(p));
      p.workspace_bytes = step_.workspace_bytes();
      kernels::mla_decode_bf16(p, step_.stream());
    } else {
      kernels::Kv4DecodeParams kp;
      kp.base = p;
      kp.format = kernel_format(p_.format);
      std::copy(layer_params(c).codebook.levels, layer_params(c).codebook.levels + 16, kp.levels);
      kp.base.workspace = step_.workspace(kernels::kv4_decode_workspace_bytes_for(kp));
      kp.base.workspace_bytes = step_.workspace_bytes();
      kernels::mla_decode_kv4(kp, step_.stream());
    }
    step_.finish("4-bit decode", p_.format + " decode", "bad page id or position");
    step_.download_decode(out, lse, n_out, n_lse);
  }

 private:
  // Allocates the cache on first use (d_c known now) and appends the queued rows.
  void flush(Cache& c, int d_c, int d_r) {
    check_cache_dim(p_.format, c.shape, d_c, d_r);
    const transform::Kv4LayerParams& L = layer_params(c);
    if (c.d_c == 0) {
      c.d_c = d_c;
      if (L.protect_bf16) {
        c.bf16 = cuda::DeviceBuffer<uint16_t>(size_t(c.shape.num_pages) * c.shape.page_size * c.shape.dim);
        cuda::check(cudaMemset(c.bf16.ptr, 0xFF, c.bf16.bytes()), "poison cache");  // NaN until written
      } else {
        const size_t page_bytes = kv4_page_bytes(p_.format, c.shape.page_size, d_c, d_r);
        c.bytes = cuda::DeviceBuffer<uint8_t>(size_t(c.shape.num_pages) * page_bytes);
        cuda::check(cudaMemset(c.bytes.ptr, 0xFF, c.bytes.count), "poison cache");  // NaN scales until written
      }
    } else {
      check_cache_d_c(p_.format, c.d_c, d_c);
    }
    for (const PendingAppend& a : c.pending) {
      step_.upload_append(a.kv_new, a.positions);
      if (L.protect_bf16) {
        auto p = step_.append_params<kernels::CacheAppendParams>(c.shape, c.page_table.ptr, a.n_new);
        p.kv_cache = c.bf16.ptr;
        p.dim = c.shape.dim;
        kernels::cache_append_bf16(p, step_.stream());
      } else {
        if (p_.format == "fp4" && L.fp4.rule != quant::Fp4ScaleRule::Round)
          throw InputError("--kv fp4 --device cuda: the GPU append implements the round scale rule (--fp4-rule " +
                           std::string(quant::fp4_rule_name(L.fp4.rule)) + " is a CPU study: use --device cpu)");
        auto p = step_.append_params<kernels::Kv4AppendParams>(c.shape, c.page_table.ptr, a.n_new);
        p.cache = c.bytes.ptr;
        p.d_c = d_c;
        p.d_r = d_r;
        p.format = kernel_format(p_.format);
        p.c = L.fp4.c;
        std::copy(L.codebook.levels, L.codebook.levels + 16, p.levels);
        kernels::kv4_cache_append(p, step_.stream());
      }
      step_.finish("4-bit cache append", p_.format + " cache append", "bad page id or position");
    }
    c.pending.clear();
  }
  Kv4Route route_;
  CudaStep step_;
};

}  // namespace

std::unique_ptr<DecodeBackend> make_cuda_kv4_backend(const transform::Kv4Params& params, Kv4Route route) {
  check_kv4_format(params);
  check_kv4_route(params.format, route);
  if (!cuda_backend_available()) throw Error("--device cuda: no CUDA device is present (use --device cpu)");
  return std::make_unique<CudaKv4Backend>(params, route);
}

}  // namespace mla::verify

#else

namespace mla::verify {
std::unique_ptr<DecodeBackend> make_cuda_kv4_backend(const transform::Kv4Params& params, Kv4Route route) {
  check_kv4_route(params.format, route);
  throw Error("--kv " + params.format +
              " --device cuda: this build has no CUDA (configure with MLA_ENABLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace mla::verify

#endif
