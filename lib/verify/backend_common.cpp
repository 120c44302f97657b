#include "verify/backend_common.hpp"

#include "core/error.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/decode_twin_bf16.hpp"
#include "quant/fp4_cache_format.hpp"
#include "quant/fp8_cache_format.hpp"
#include "quant/fp8_decode_twin.hpp"
#include "transform/kv4_params.hpp"

#if MLA_HAVE_CUDA
#include "kernels/fp8_decode.hpp"
#endif

namespace mla::verify {

void check_cache_dim(const std::string& format, const CacheShape& s, int d_c, int d_r) {
  if (d_c + d_r != s.dim)
    throw InputError(format + " backend: d_c + d_r = " + std::to_string(d_c + d_r) + " differs from the cache's dim " +
                     std::to_string(s.dim));
}

void check_cache_d_c(const std::string& format, int cache_d_c, int d_c) {
  if (cache_d_c != d_c)
    throw InputError(format + " backend: d_c = " + std::to_string(d_c) + " differs from the cache's " +
                     std::to_string(cache_d_c));
}

void check_kv4_format(const transform::Kv4Params& params) {
  if (!transform::is_kv4_format(params.format))
    throw InputError("4-bit backend: format must be fp4 or codebook, got '" + params.format + "'");
}

void check_kv4_layer(const transform::Kv4Params& params, int64_t layer) {
  if (layer < 0 || layer >= static_cast<int64_t>(params.layers.size()))
    throw InputError("--kv " + params.format + ": layer " + std::to_string(layer) + " has no parameters in " +
                     params.calib + " (" + std::to_string(params.layers.size()) + " layers)");
}

size_t kv4_page_bytes(const std::string& format, int page_size, int d_c, int d_r) {
  if (format == "fp4") {
    const quant::Fp4CacheLayout l{page_size, d_c, d_r};
    quant::validate_fp4_layout(l);
    return l.page_bytes();
  }
  const quant::CodebookCacheLayout l{page_size, d_c, d_r};
  quant::validate_codebook_layout(l);
  return l.page_bytes();
}

void check_kv4_route(const std::string& format, Kv4Route route) {
  if (route == Kv4Route::Bf16 && transform::is_kv4_format(format)) return;
  if (route == Kv4Route::Fp8 && format == "fp4") return;
  if (format == "codebook")
    throw InputError("--kv codebook --kv4-route fp8: the codebook cache has no FP8 route (the FP8 route converts "
                     "FP4 pages to FP8 ones; use --kv4-route bf16, or --kv fp4)");
  throw InputError("--kv4-route " + std::string(kv4_route_name(route)) + " is read with --kv " +
                   (route == Kv4Route::Fp8 ? "fp4" : "fp4 or codebook") + " only (got --kv " + format + ")");
}

Kv4Route checked_kv4_route(const std::string& kv, const std::string& route_name) {
  const Kv4Route route = parse_kv4_route(route_name);
  if (route != Kv4Route::Bf16 || transform::is_kv4_format(kv)) check_kv4_route(kv, route);
  return route;
}

void check_kv4_fp8_route_shape(int heads, int d_c, int d_r, int page_size) {
  const std::string shape = "heads = " + std::to_string(heads) + ", d_c = " + std::to_string(d_c) +
                            ", d_r = " + std::to_string(d_r) + ", page_size = " + std::to_string(page_size);
  std::string why;
  quant::Fp8DecodeParams rows;  // the row-block choice needs only the shape
  rows.heads = heads;
  rows.d_c = d_c;
  if (!quant::fp8_decode_gpu_d_c(d_c)) why = "d_c must be 128, 256 or 512";
  else if (!quant::fp8_decode_gpu_d_r(d_r)) why = "d_r must be 32 or 64";
  else if (page_size != 64 && page_size != 128) why = "page_size must be 64 or 128";
  else if (heads < 1 || heads > 128) why = "heads must be 1..128";
  else if (quant::fp8_decode_uses_pair(rows))
    why = std::to_string(heads) + " query rows at d_c = " + std::to_string(d_c) + ": at d_c <= 256 the route takes <= " +
          std::to_string(quant::kFp8DecodeRowsPerBlock) + " (more rows go to the 128-row TPLA-slice kernel, which " +
          "reads no FP4)";
  if (!why.empty())
    throw InputError("--kv fp4 --kv4-route fp8: (" + shape + ") has no FP8-route kernel: " + why +
                     " (kernels/fp8_decode.hpp fp8_decode_fp4_cache_bf16q); --kv4-route bf16 takes it");
}

std::vector<uint16_t> poisoned_bf16_pages(const CacheShape& s) {
  return std::vector<uint16_t>(size_t(s.num_pages) * s.page_size * s.dim, 0x7FC0);
}

void append_bf16_twin(const CacheShape& s, const std::vector<int32_t>& page_table, std::vector<uint16_t>& pages,
                      const uint16_t* kv_new, int n_new, const int32_t* positions) {
  quant::cache_append_twin_bf16(kv_new, s.batch, n_new, s.dim, positions, page_table.data(), s.max_pages, pages.data(),
                                s.num_pages, s.page_size);
}

void decode_bf16_twin(const CacheShape& s, const uint16_t* pages, const std::vector<int32_t>& page_table,
                      const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
                      float scale, std::vector<uint16_t>& out, std::vector<float>& lse) {
  out.assign(size_t(s.batch) * heads * d_c, 0);
  lse.assign(size_t(s.batch) * heads, 0.f);
  quant::Bf16DecodeParams p = decode_params(s, heads, d_c, d_r, scale);
  p.q = q.data();
  p.kv_cache = pages;
  p.page_table = page_table.data();
  p.seqlens = seqlens.data();
  p.out = out.data();
  p.lse = lse.data();
  quant::decode_twin_bf16(p);
}

void decode_fp8_twin(const CacheShape& s, const uint8_t* pages, const std::vector<int32_t>& page_table,
                     const std::vector<uint16_t>& q, int heads, int d_c, int d_r, const std::vector<int32_t>& seqlens,
                     float scale, std::vector<uint16_t>& out, std::vector<float>& lse) {
  const int rows = s.batch * heads;
  std::vector<uint8_t> q8(size_t(rows) * d_c);
  std::vector<uint16_t> qr(size_t(rows) * d_r);
  std::vector<float> qs(rows);
  quant::fp8_quantize_query_twin(q.data(), rows, d_c, d_r, q8.data(), qr.data(), qs.data());
  out.assign(size_t(rows) * d_c, 0);
  lse.assign(rows, 0.f);
  quant::Fp8DecodeParams p = decode_params<quant::Fp8DecodeParams>(s, heads, d_c, d_r, scale);
  p.q8 = q8.data();
  p.q_rope = qr.data();
  p.q_scale = qs.data();
  p.cache = pages;
  p.page_table = page_table.data();
  p.seqlens = seqlens.data();
  p.out = out.data();
  p.lse = lse.data();
  quant::fp8_decode_twin(p);
}

#if MLA_HAVE_CUDA

using cuda::check;

std::string cuda_device_name() {
  cudaDeviceProp prop{};
  int dev = 0;
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&prop, dev);
  return prop.name;
}

CudaStep::CudaStep() {
  check(cudaStreamCreate(&stream_), "cudaStreamCreate");
  flag_ = cuda::DeviceBuffer<int>(1);
  check(cudaMemset(flag_.ptr, 0, sizeof(int)), "memset");
}

CudaStep::~CudaStep() { cudaStreamDestroy(stream_); }

void CudaStep::upload_append(const std::vector<uint16_t>& kv_new, const std::vector<int32_t>& positions) {
  kv_.upload(kv_new);
  pos_.upload(positions);
}

void CudaStep::upload_decode(const std::vector<uint16_t>& q, const std::vector<int32_t>& seqlens, size_t n_out,
                             size_t n_lse) {
  q_.upload(q);
  seqlens_.upload(seqlens);
  if (out_.count < n_out) out_ = cuda::DeviceBuffer<uint16_t>(n_out);
  if (lse_.count < n_lse) lse_ = cuda::DeviceBuffer<float>(n_lse);
}

void* CudaStep::workspace(size_t bytes) {
  if (ws_.count < bytes) ws_ = cuda::DeviceBuffer<unsigned char>(bytes);
  return ws_.ptr;
}

void CudaStep::finish(const char* sync_what, const std::string& what, const char* problem) {
  check(cudaStreamSynchronize(stream_), sync_what);
  std::vector<int> f;
  flag_.download(f, 1);
  if (f[0] != 0)
    throw Error(what + ": kernel reported a " + problem + " (error flag " + std::to_string(f[0]) + ")");
}

void CudaStep::download_decode(std::vector<uint16_t>& out, std::vector<float>& lse, size_t n_out, size_t n_lse) const {
  out_.download(out, n_out);
  lse_.download(lse, n_lse);
}

void decode_fp8_cuda(CudaStep& step, const CacheShape& s, const uint8_t* pages, const int32_t* page_table,
                     bool fp4_pages, const std::vector<uint16_t>& q, int heads, int d_c, int d_r,
                     const std::vector<int32_t>& seqlens, float scale, std::vector<uint16_t>& out,
                     std::vector<float>& lse, const std::string& what) {
  const size_t n_out = size_t(s.batch) * heads * d_c, n_lse = size_t(s.batch) * heads;
  step.upload_decode(q, seqlens, n_out, n_lse);
  quant::Fp8DecodeParams p = decode_params<quant::Fp8DecodeParams>(s, heads, d_c, d_r, scale);
  p.cache = pages;
  p.page_table = page_table;
  step.set_decode_buffers(p);
  p.workspace = step.workspace(kernels::fp8_decode_workspace_bytes(p, true));
  p.workspace_bytes = step.workspace_bytes();
  if (fp4_pages) kernels::fp8_decode_fp4_cache_bf16q(p, step.q(), step.stream());
  else kernels::fp8_decode_bf16q(p, step.q(), step.stream());
  step.finish(what.c_str(), what);
  step.download_decode(out, lse, n_out, n_lse);
}

#endif

}  // namespace mla::verify
