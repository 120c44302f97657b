// The CUDA backend: device copies of each rank's cache, the kernels' host launchers, one
// stream. Compiled only when the build has CUDA (MLA_HAVE_CUDA); otherwise the factory says so.
#include "core/error.hpp"
#include "verify/backend_common.hpp"
#include "verify/decode_backend.hpp"

#if MLA_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cache_append.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/mla_decode.hpp"

namespace mla::verify {
namespace {

using cuda::check;
using cuda::DeviceBuffer;

class CudaBackend final : public DecodeBackend {
 public:
  std::string name() const override { return "cuda (" + cuda_device_name() + ")"; }

  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c;
    c.shape = s;
    c.data = DeviceBuffer<uint16_t>(size_t(s.num_pages) * s.page_size * s.dim);
    check(cudaMemset(c.data.ptr, 0xFF, c.data.count * sizeof(uint16_t)), "poison cache");  // NaN bits
    c.page_table.upload(page_table);
    return caches_.add(std::move(c));
  }

  void append(int cache, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) override {
    Cache& c = caches_.at(cache);
    step_.upload_append(kv_new, positions);
    auto p = step_.append_params<kernels::CacheAppendParams>(c.shape, c.page_table.ptr, n_new);
    p.kv_cache = c.data.ptr;
    p.dim = c.shape.dim;
    kernels::cache_append_bf16(p, step_.stream());
    step_.finish("cache append", "cache append");
  }

  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    const size_t n_out = size_t(c.shape.batch) * heads * d_c;
    const size_t n_lse = size_t(c.shape.batch) * heads;
    step_.upload_decode(q, seqlens, n_out, n_lse);
    quant::Bf16DecodeParams p = decode_params(c.shape, heads, d_c, d_r, scale);
    p.q = step_.q();
    p.kv_cache = c.data.ptr;
    p.page_table = c.page_table.ptr;
    step_.set_decode_buffers(p);
    p.workspace = step_.workspace(kernels::decode_workspace_bytes_for(p));
    p.workspace_bytes = step_.workspace_bytes();
    kernels::mla_decode_bf16(p, step_.stream());
    step_.finish("decode", "decode");
    step_.download_decode(out, lse, n_out, n_lse);
  }

 private:
  struct Cache {
    CacheShape shape;
    DeviceBuffer<uint16_t> data;
    DeviceBuffer<int32_t> page_table;
  };
  CudaStep step_;
  CacheList<Cache> caches_;
};

}  // namespace

bool cuda_backend_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<DecodeBackend> make_cuda_backend() {
  if (!cuda_backend_available()) throw Error("--device cuda: no CUDA device is present (use --device cpu)");
  return std::make_unique<CudaBackend>();
}

}  // namespace mla::verify

#else

namespace mla::verify {
bool cuda_backend_available() { return false; }
std::unique_ptr<DecodeBackend> make_cuda_backend() {
  throw Error("--device cuda: this build has no CUDA (configure with MLA_ENABLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace mla::verify

#endif
