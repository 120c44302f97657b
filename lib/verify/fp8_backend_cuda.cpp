// The FP8 backend on the GPU: each rank's cache in FP8 pages on the device, the append kernel
// (queued BF16 rows encoded before the decode that needs them), query quantisation and the FP8
// decode kernel on one stream. Without CUDA the factory says so.
#include "core/error.hpp"
#include "verify/fp8_backend.hpp"

#if MLA_HAVE_CUDA
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda_check.hpp"
#include "kernels/fp8_append.hpp"
#include "kernels/fp8_decode.hpp"
#include "quant/fp8_cache_format.hpp"

namespace mla::verify {
namespace {

using cuda::check;
template <typename T>
using Buf = cuda::DeviceBuffer<T>;

class CudaFp8Backend final : public DecodeBackend {
 public:
  CudaFp8Backend() {
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    flag_ = Buf<int>(1);
    check(cudaMemset(flag_.ptr, 0, sizeof(int)), "memset");
  }
  ~CudaFp8Backend() override { cudaStreamDestroy(stream_); }
  std::string name() const override {
    cudaDeviceProp prop{};
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    return std::string("cuda fp8 (") + prop.name + ")";
  }
  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c;
    c.shape = s;
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
    flush(c, d_c, d_r);
    const size_t n_out = size_t(c.shape.batch) * heads * d_c, n_lse = size_t(c.shape.batch) * heads;
    q_.upload(q);
    seqlens_.upload(seqlens);
    if (out_.count < n_out) out_ = Buf<uint16_t>(n_out);
    if (lse_.count < n_lse) lse_ = Buf<float>(n_lse);
    quant::Fp8DecodeParams p;
    p.cache = c.bytes.ptr;
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
    if (!kernels::fp8_decode_shape_supported(p))
      throw InputError("--kv fp8 --device cuda: (d_c, d_r) = (" + std::to_string(d_c) + ", " + std::to_string(d_r) +
                       ") has no GPU kernel (d_c 128, 256, 512 with d_r 32 or 64); use --device cpu for the twin");
    const size_t ws = kernels::fp8_decode_workspace_bytes(p, true);
    if (ws_.count < ws) ws_ = Buf<unsigned char>(ws);
    p.workspace = ws_.ptr;
    p.workspace_bytes = ws_.count;
    kernels::fp8_decode_bf16q(p, q_.ptr, stream_);
    check(cudaStreamSynchronize(stream_), "fp8 decode");
    check_flag("fp8 decode");
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
    Buf<int32_t> page_table;
    Buf<uint8_t> bytes;
    std::vector<Pending> pending;
    int d_c = 0;
  };
  void flush(Cache& c, int d_c, int d_r) {
    if (d_c + d_r != c.shape.dim)
      throw InputError("fp8 backend: d_c + d_r = " + std::to_string(d_c + d_r) + " differs from the cache's dim " +
                       std::to_string(c.shape.dim));
    const quant::Fp8CacheLayout l{c.shape.page_size, d_c, d_r};
    if (c.bytes.ptr == nullptr) {
      quant::validate_fp8_layout(l);
      c.bytes = Buf<uint8_t>(size_t(c.shape.num_pages) * l.page_bytes());
      check(cudaMemset(c.bytes.ptr, 0xFF, c.bytes.count), "poison cache");  // NaN codes and scales
      c.d_c = d_c;
    } else if (c.d_c != d_c) {
      throw InputError("fp8 backend: d_c = " + std::to_string(d_c) + " differs from the cache's " + std::to_string(c.d_c));
    }
    for (const Pending& a : c.pending) {
      kv_.upload(a.kv_new);
      pos_.upload(a.positions);
      kernels::Fp8AppendParams p;
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
      kernels::fp8_cache_append(p, stream_);
      check(cudaStreamSynchronize(stream_), "fp8 cache append");
      check_flag("fp8 cache append");
    }
    c.pending.clear();
  }
  void check_flag(const char* what) {
    std::vector<int> f;
    flag_.download(f, 1);
    if (f[0] != 0) throw Error(std::string(what) + ": kernel reported a bad page id (error flag " + std::to_string(f[0]) + ")");
  }
  cudaStream_t stream_{};
  std::vector<Cache> caches_;
  Buf<uint16_t> kv_, q_, out_;
  Buf<int32_t> pos_, seqlens_;
  Buf<float> lse_;
  Buf<unsigned char> ws_;
  Buf<int> flag_;
};

}  // namespace

std::unique_ptr<DecodeBackend> make_cuda_fp8_backend() {
  if (!cuda_backend_available()) throw Error("--device cuda: no CUDA device is present (use --device cpu)");
  return std::make_unique<CudaFp8Backend>();
}

}  // namespace mla::verify

#else

namespace mla::verify {
std::unique_ptr<DecodeBackend> make_cuda_fp8_backend() {
  throw Error("--device cuda: this build has no CUDA (configure with MLA_ENABLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace mla::verify

#endif
