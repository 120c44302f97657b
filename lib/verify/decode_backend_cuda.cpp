// The CUDA backend: device copies of each rank's cache, the kernels' host launchers, one
// stream. Compiled only when the build has CUDA (MLA_HAVE_CUDA); otherwise the factory says so.
#include "core/error.hpp"
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
  CudaBackend() {
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    error_flag_ = DeviceBuffer<int>(1);
    check(cudaMemset(error_flag_.ptr, 0, sizeof(int)), "memset");
  }
  ~CudaBackend() override { cudaStreamDestroy(stream_); }
  std::string name() const override {
    cudaDeviceProp prop{};
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    return std::string("cuda (") + prop.name + ")";
  }

  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c;
    c.shape = s;
    c.data = DeviceBuffer<uint16_t>(size_t(s.num_pages) * s.page_size * s.dim);
    check(cudaMemset(c.data.ptr, 0xFF, c.data.count * sizeof(uint16_t)), "poison cache");  // NaN bits
    c.page_table.upload(page_table);
    caches_.push_back(std::move(c));
    return static_cast<int>(caches_.size() - 1);
  }

  void append(int cache, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) override {
    Cache& c = caches_.at(cache);
    kv_new_.upload(kv_new);
    positions_.upload(positions);
    kernels::CacheAppendParams p;
    p.kv_new = kv_new_.ptr;
    p.positions = positions_.ptr;
    p.page_table = c.page_table.ptr;
    p.kv_cache = c.data.ptr;
    p.error_flag = error_flag_.ptr;
    p.batch = c.shape.batch;
    p.n_new = n_new;
    p.dim = c.shape.dim;
    p.max_pages = c.shape.max_pages;
    p.num_pages = c.shape.num_pages;
    p.page_size = c.shape.page_size;
    kernels::cache_append_bf16(p, stream_);
    check(cudaStreamSynchronize(stream_), "cache append");
    check_flag("cache append");
  }

  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    const size_t n_out = size_t(c.shape.batch) * heads * d_c;
    const size_t n_lse = size_t(c.shape.batch) * heads;
    q_.upload(q);
    seqlens_.upload(seqlens);
    if (out_.count < n_out) out_ = DeviceBuffer<uint16_t>(n_out);
    if (lse_.count < n_lse) lse_ = DeviceBuffer<float>(n_lse);
    quant::Bf16DecodeParams p = decode_params(c.shape, heads, d_c, d_r, scale);
    p.q = q_.ptr;
    p.kv_cache = c.data.ptr;
    p.page_table = c.page_table.ptr;
    p.seqlens = seqlens_.ptr;
    p.out = out_.ptr;
    p.lse = lse_.ptr;
    const size_t ws = kernels::decode_workspace_bytes_for(p);
    if (workspace_.count < ws) workspace_ = DeviceBuffer<unsigned char>(ws);
    p.workspace = workspace_.ptr;
    p.workspace_bytes = workspace_.count;
    p.error_flag = error_flag_.ptr;
    kernels::mla_decode_bf16(p, stream_);
    check(cudaStreamSynchronize(stream_), "decode");
    check_flag("decode");
    out_.download(out, n_out);
    lse_.download(lse, n_lse);
  }

 private:
  void check_flag(const char* what) {
    std::vector<int> flag;
    error_flag_.download(flag, 1);
    if (flag[0] != 0) throw Error(std::string(what) + ": kernel reported a bad page id (error flag " + std::to_string(flag[0]) + ")");
  }
  struct Cache {
    CacheShape shape;
    DeviceBuffer<uint16_t> data;
    DeviceBuffer<int32_t> page_table;
  };
  cudaStream_t stream_{};
  std::vector<Cache> caches_;
  DeviceBuffer<uint16_t> kv_new_, q_, out_;
  DeviceBuffer<int32_t> positions_, seqlens_;
  DeviceBuffer<float> lse_;
  DeviceBuffer<unsigned char> workspace_;
  DeviceBuffer<int> error_flag_;
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
