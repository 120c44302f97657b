// The FP8 backend on the GPU: each rank's cache in FP8 pages on the device, the append kernel
// (queued BF16 rows encoded before the decode that needs them), query quantisation and the FP8
// decode kernel on one stream. Without CUDA the factory says so.
#include "core/error.hpp"
#include "verify/backend_common.hpp"
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

struct Fp8Cache {
  CacheShape shape;
  cuda::DeviceBuffer<int32_t> page_table;
  cuda::DeviceBuffer<uint8_t> bytes;
  std::vector<PendingAppend> pending;
  int d_c = 0;
};

class CudaFp8Backend final : public QueuedAppendBackend<Fp8Cache> {
  using Cache = Fp8Cache;

 public:
  std::string name() const override { return "cuda fp8 (" + cuda_device_name() + ")"; }
  int create_cache(const CacheShape& s, const std::vector<int32_t>& page_table) override {
    Cache c;
    c.shape = s;
    c.page_table.upload(page_table);
    return caches_.add(std::move(c));
  }
  void decode(int cache, const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
              float scale, std::vector<uint16_t>& out, std::vector<float>& lse) override {
    Cache& c = caches_.at(cache);
    flush(c, d_c, d_r);
    if (!kernels::fp8_decode_shape_supported(decode_params<quant::Fp8DecodeParams>(c.shape, heads, d_c, d_r, scale)))
      throw InputError("--kv fp8 --device cuda: (d_c, d_r) = (" + std::to_string(d_c) + ", " + std::to_string(d_r) +
                       ") has no GPU kernel (d_c 128, 256, 512 with d_r 32 or 64); use --device cpu for the twin");
    decode_fp8_cuda(step_, c.shape, c.bytes.ptr, c.page_table.ptr, /*fp4_pages=*/false, q, heads, d_c, d_r, seqlens,
                    scale, out, lse, "fp8 decode");
  }

 private:
  void flush(Cache& c, int d_c, int d_r) {
    check_cache_dim("fp8", c.shape, d_c, d_r);
    const quant::Fp8CacheLayout l{c.shape.page_size, d_c, d_r};
    if (c.bytes.ptr == nullptr) {
      quant::validate_fp8_layout(l);
      c.bytes = cuda::DeviceBuffer<uint8_t>(size_t(c.shape.num_pages) * l.page_bytes());
      cuda::check(cudaMemset(c.bytes.ptr, 0xFF, c.bytes.count), "poison cache");  // NaN codes and scales
      c.d_c = d_c;
    } else {
      check_cache_d_c("fp8", c.d_c, d_c);
    }
    for (const PendingAppend& a : c.pending) {
      step_.upload_append(a.kv_new, a.positions);
      auto p = step_.append_params<kernels::Fp8AppendParams>(c.shape, c.page_table.ptr, a.n_new);
      p.cache = c.bytes.ptr;
      p.d_c = d_c;
      p.d_r = d_r;
      kernels::fp8_cache_append(p, step_.stream());
      step_.finish("fp8 cache append", "fp8 cache append");
    }
    c.pending.clear();
  }
  CudaStep step_;
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
