#pragma once
// What verify-decode's decode backends share (decode_backend_*.cpp, fp8_backend*.cpp,
// kv4_backend*.cpp), so each backend file holds only its format:
//   - caches by handle, and the queue of BF16 appends of the quantised formats: their page
//     layouts need d_c, which DecodeBackend gives only at decode time, so appends are queued and
//     encoded before the first decode that needs them (bit-exactly as at append time);
//   - the checks a flush makes (d_c + d_r against the cache, d_c against the first decode's);
//   - the 4-bit formats' parameter checks and page size, the fp8 route's format and shape
//     checks (CPU and GPU backends);
//   - the CPU twin on host BF16 pages (the BF16 backend, a 4-bit backend's dequantised view or
//     protected layer, the SnapMLA study configurations);
//   - the FP8 decode twin on host FP8 pages from a BF16 query (the FP8 backend, the 4-bit
//     backend's fp8 route);
//   - with CUDA: the stream, the device error flag and the device buffers of one step, and the
//     FP8 decode of a step from its BF16 query (FP8 pages, or FP4 pages on the fp8 route).
// Internal to lib/verify: MLA_HAVE_CUDA is defined for mla_verify's sources only.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "transform/kv4_params.hpp"
#include "verify/decode_backend.hpp"
#include "verify/kv4_backend.hpp"

#if MLA_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda_check.hpp"
#endif

namespace mla::verify {

// One append, queued as BF16 rows until the cache's layout is known.
struct PendingAppend {
  std::vector<uint16_t> kv_new;
  int n_new = 0;
  std::vector<int32_t> positions;
};

// A backend's caches; create_cache returns the index as the handle.
template <typename Cache>
class CacheList {
 public:
  int add(Cache c) {
    caches_.push_back(std::move(c));
    return static_cast<int>(caches_.size() - 1);
  }
  Cache& at(int handle) { return caches_.at(handle); }
  // Queues an append on a cache with a `std::vector<PendingAppend> pending`.
  void queue(int handle, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) {
    at(handle).pending.push_back(PendingAppend{kv_new, n_new, positions});
  }

 private:
  std::vector<Cache> caches_;
};

// The quantised-cache backends' base: caches by handle, appends queued until a decode flushes
// them (Cache has a `std::vector<PendingAppend> pending`).
template <typename Cache>
class QueuedAppendBackend : public DecodeBackend {
 public:
  void append(int cache, const std::vector<uint16_t>& kv_new, int n_new, const std::vector<int32_t>& positions) final {
    caches_.queue(cache, kv_new, n_new, positions);
  }

 protected:
  CacheList<Cache> caches_;
};

// InputError "<format> backend: d_c + d_r = X differs from the cache's dim Y".
void check_cache_dim(const std::string& format, const CacheShape& s, int d_c, int d_r);
// InputError "<format> backend: d_c = X differs from the cache's Y" unless they are equal.
void check_cache_d_c(const std::string& format, int cache_d_c, int d_c);

// The 4-bit backends (fp4, codebook): InputError unless params.format is one of them.
void check_kv4_format(const transform::Kv4Params& params);
// InputError "--kv <format>: layer L has no parameters in <calib> (N layers)" when out of range.
void check_kv4_layer(const transform::Kv4Params& params, int64_t layer);
// The 4-bit backends' base (fp4, codebook; CPU and GPU): the per-layer parameters and the layer
// the next caches are made for (Cache has an `int64_t layer`).
template <typename Cache>
class Kv4BackendBase : public QueuedAppendBackend<Cache> {
 public:
  explicit Kv4BackendBase(transform::Kv4Params p) : p_(std::move(p)) {}
  void begin_layer(int64_t layer) final {
    check_kv4_layer(p_, layer);
    layer_ = layer;
  }

 protected:
  const transform::Kv4LayerParams& layer_params(const Cache& c) const {
    return p_.layers.at(static_cast<size_t>(c.layer));
  }
  transform::Kv4Params p_;
  int64_t layer_ = 0;
};
// Bytes of one page of the 4-bit format's layout (the layout validated first: InputError naming
// e.g. d_c = 16).
size_t kv4_page_bytes(const std::string& format, int page_size, int d_c, int d_r);
// InputError unless `format` (a --kv name) has the route: bf16 for fp4 and codebook, fp8 for fp4
// only (the codebook has no FP8 route; other formats no route at all).
void check_kv4_route(const std::string& format, Kv4Route route);
// The --kv4-route given with a --kv: parsed (InputError for an unknown name) and, where it
// applies (a 4-bit format, or any route but bf16), checked with check_kv4_route.
Kv4Route checked_kv4_route(const std::string& kv, const std::string& route_name);
// InputError naming the shape unless the fp8 route has a GPU kernel for it (kernels/fp8_decode.hpp,
// fp8_decode_fp4_cache_bf16q): d_c 128, 256 or 512, d_r 32 or 64, pages of 64 or 128 tokens, and
// heads (s_q = 1 rows) <= 64 at d_c <= 256 (more rows there take the 128-row TPLA-slice kernel,
// which reads no FP4). The CPU twin refuses the same shapes, so it twins only what the GPU runs.
void check_kv4_fp8_route_shape(int heads, int d_c, int d_r, int page_size);

// The BF16 twin on host pages [num_pages, page_size, dim] bf16 bits of a cache of shape s:
// pages as created (0x7FC0, NaN, until written), quant::cache_append_twin_bf16 and
// quant::decode_twin_bf16 (out [batch, heads, d_c] and lse [batch, heads] resized and written).
std::vector<uint16_t> poisoned_bf16_pages(const CacheShape& s);
void append_bf16_twin(const CacheShape& s, const std::vector<int32_t>& page_table, std::vector<uint16_t>& pages,
                      const uint16_t* kv_new, int n_new, const int32_t* positions);
void decode_bf16_twin(const CacheShape& s, const uint16_t* pages, const std::vector<int32_t>& page_table,
                      const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
                      float scale, std::vector<uint16_t>& out, std::vector<float>& lse);
// The FP8 twin on host FP8 pages (quant/fp8_cache_layout.hpp, d_c and d_r as given) of a cache of
// shape s: q [batch, heads, d_c + d_r] bf16 quantised per row (quant::fp8_quantize_query_twin,
// what kernels::fp8_decode_bf16q does on the GPU), then quant::fp8_decode_twin with the default
// num_parts (out and lse resized and written as decode_bf16_twin's).
void decode_fp8_twin(const CacheShape& s, const uint8_t* pages, const std::vector<int32_t>& page_table,
                     const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
                     float scale, std::vector<uint16_t>& out, std::vector<float>& lse);

#if MLA_HAVE_CUDA
// The device's name, for DecodeBackend::name().
std::string cuda_device_name();

// What every CUDA backend holds: one stream, one device error flag (zero until a kernel reports
// a bad page id) and the device buffers of a step, reused while large enough.
class CudaStep {
 public:
  CudaStep();
  ~CudaStep();
  CudaStep(const CudaStep&) = delete;
  CudaStep& operator=(const CudaStep&) = delete;

  cudaStream_t stream() const { return stream_; }
  // One append's rows and positions on the device.
  void upload_append(const std::vector<uint16_t>& kv_new, const std::vector<int32_t>& positions);
  // The fields every append kernel's parameters share (kernels::CacheAppendParams,
  // Fp8AppendParams, Kv4AppendParams) for the uploaded rows and a cache of shape s; the cache
  // pointer and its row width (dim, or d_c and d_r) are the caller's.
  template <typename Params>
  Params append_params(const CacheShape& s, const int32_t* page_table, int n_new) const {
    Params p;
    p.kv_new = kv_.ptr;
    p.positions = pos_.ptr;
    p.page_table = page_table;
    p.error_flag = flag_.ptr;
    p.batch = s.batch;
    p.n_new = n_new;
    p.max_pages = s.max_pages;
    p.num_pages = s.num_pages;
    p.page_size = s.page_size;
    return p;
  }
  // A decode step: q and seqlens on the device, out (n_out) and lse (n_lse) large enough.
  void upload_decode(const std::vector<uint16_t>& q, const std::vector<int32_t>& seqlens, size_t n_out, size_t n_lse);
  const uint16_t* q() const { return q_.ptr; }
  // The step's lengths, outputs and error flag in a decode parameter block (quant::Bf16DecodeParams,
  // quant::Fp8DecodeParams: the same fields).
  template <typename Params>
  void set_decode_buffers(Params& p) const {
    p.seqlens = seqlens_.ptr;
    p.out = out_.ptr;
    p.lse = lse_.ptr;
    p.error_flag = flag_.ptr;
  }
  // The decode's scratch, grown to at least `bytes`; its size in workspace_bytes().
  void* workspace(size_t bytes);
  size_t workspace_bytes() const { return ws_.count; }
  // Waits for the stream (cuda::check names `sync_what`), then throws Error
  // "<what>: kernel reported a <problem> (error flag N)" when a kernel set the flag.
  void finish(const char* sync_what, const std::string& what, const char* problem = "bad page id");
  void download_decode(std::vector<uint16_t>& out, std::vector<float>& lse, size_t n_out, size_t n_lse) const;

 private:
  cudaStream_t stream_{};
  cuda::DeviceBuffer<int> flag_;
  cuda::DeviceBuffer<uint16_t> kv_, q_, out_;
  cuda::DeviceBuffer<int32_t> pos_, seqlens_;
  cuda::DeviceBuffer<float> lse_;
  cuda::DeviceBuffer<unsigned char> ws_;
};

// One FP8 decode step on the device from the BF16 query: kernels::fp8_decode_bf16q on FP8 pages,
// or (fp4_pages) kernels::fp8_decode_fp4_cache_bf16q on FP4 pages, on step's stream with the
// device's default num_parts; waits, checks the error flag (`what` names the decode) and
// downloads out and lse as decode_fp8_twin writes them.
void decode_fp8_cuda(CudaStep& step, const CacheShape& s, const uint8_t* pages, const int32_t* page_table,
                     bool fp4_pages, const std::vector<uint16_t>& q, int heads, int d_c, int d_r,
                     const std::vector<int32_t>& seqlens, float scale, std::vector<uint16_t>& out,
                     std::vector<float>& lse, const std::string& what);
#endif

}  // namespace mla::verify
