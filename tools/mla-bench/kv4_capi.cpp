// C entry points to the 4-bit caches (FP4 and codebook), for the peer benchmark driven from
// Python (ctypes, tools/mla-bench/peer_kv4.py): ours and FlashMLA's BF16 dense decode run in one
// process on caches holding the same values. Also the ABI behind the Python package's FP4 and
// codebook functions (python/mla_toolchain/kv_quant.py; docs/python.md): keep these signatures
// stable, add new entry points beside them. The C++ API is kernels/kv4_append.hpp and
// kernels/kv4_decode.hpp. `format`: 0 = FP4, 1 = codebook (`levels`: its 16 fp32 levels, host).
#include <exception>
#include <string>

#include "capi_common.hpp"
#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/fp8_decode.hpp"
#include "kernels/kv4_append.hpp"
#include "kernels/kv4_decode.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"
#include "quant/fp4_to_fp8.hpp"
#ifdef MLA_TIMELINE
#include "kernels/decode_launch.hpp"
#endif

namespace {

using mla::kernels::Kv4Format;

// The C `format` (0 FP4, 1 codebook); the codebook needs its levels. mla::InputError otherwise.
Kv4Format kv4_format(int format, const float* levels) {
  if (format != 0 && format != 1)
    throw mla::InputError("kv4 capi: format = " + std::to_string(format) + " (0 = FP4, 1 = codebook)");
  if (format == 1 && levels == nullptr) throw mla::InputError("kv4 capi: the codebook format needs its 16 levels");
  return format == 1 ? Kv4Format::Codebook : Kv4Format::Fp4;
}

mla::quant::CodebookTable codebook_table(const float* levels) {
  mla::quant::CodebookTable t;
  for (int i = 0; i < mla::quant::kCodebookLevels; ++i) t.levels[i] = levels[i];
  return t;
}

}  // namespace

extern "C" {

// Default parts for the shape and route on the current device (0 on error) and the workspace
// bytes. route 0: the BF16 route (kernels/kv4_decode.hpp); 1: the FP8-tensor-core route of an
// FP4 cache (kernels/fp8_decode.hpp fp8_decode_fp4_cache_bf16q).
int mla_kv4_capi_parts(int route, int batch, int s_q, int heads, int d_c, int d_r, size_t* workspace_bytes) {
  try {
    if (route == 1) {
      auto p = mla::capi::decode_shape<mla::quant::Fp8DecodeParams>(batch, s_q, heads, d_c, d_r);
      p.num_parts = mla::kernels::fp8_decode_parts_for_device(p);
      *workspace_bytes = mla::kernels::fp8_decode_workspace_bytes(p, true);
      return p.num_parts;
    }
    mla::kernels::Kv4DecodeParams kp;
    kp.base = mla::capi::decode_shape<mla::quant::Bf16DecodeParams>(batch, s_q, heads, d_c, d_r);
    kp.base.num_parts = mla::kernels::kv4_decode_parts_for_device(kp);
    *workspace_bytes = mla::kernels::kv4_decode_workspace_bytes_for(kp);
    return kp.base.num_parts;
  } catch (const std::exception&) {
    return 0;
  }
}

// The decode on `stream` (route as above, the FP8 route for FP4 only); 0 on success, else 1 with
// the message in err. mode (FP8 route only, mla::capi::PlanMode): 0 the decode schedules itself,
// 1 fp8_decode_plan only, 2 a planned decode.
int mla_kv4_capi_run(int route, int format, const float* levels, const void* q, const void* cache, const int32_t* page_table,
                     const int32_t* seqlens, void* out, float* lse, int batch, int s_q, int heads, int d_c, int d_r,
                     int num_pages, int page_size, int max_pages, float scale, int num_parts, void* workspace,
                     size_t workspace_bytes, int mode, void* stream, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    const Kv4Format f = kv4_format(format, levels);
    if (route != 0 && route != 1)
      throw mla::InputError("kv4 capi: route = " + std::to_string(route) + " (0 = BF16, 1 = FP8 tensor cores)");
    if (route == 1) {
      if (f != Kv4Format::Fp4) throw mla::InputError("kv4 capi: route 1 (FP8 tensor cores) reads FP4 pages only");
      auto p = mla::capi::decode_params<mla::quant::Fp8DecodeParams>(page_table, seqlens, out, lse, batch, s_q, heads,
                                                                     d_c, d_r, num_pages, page_size, max_pages, scale);
      p.cache = static_cast<const uint8_t*>(cache);
      mla::capi::set_split(p, num_parts, workspace, workspace_bytes);
      if (mla::capi::plan_or_mark(p, mode, static_cast<cudaStream_t>(stream))) return;
      mla::kernels::fp8_decode_fp4_cache_bf16q(p, static_cast<const uint16_t*>(q), static_cast<cudaStream_t>(stream));
      return;
    }
    if (mode != 0) throw mla::InputError("kv4 capi: mode = " + std::to_string(mode) + " (plans exist for route 1 only)");
    mla::kernels::Kv4DecodeParams kp;
    kp.base = mla::capi::decode_params<mla::quant::Bf16DecodeParams>(page_table, seqlens, out, lse, batch, s_q, heads,
                                                                     d_c, d_r, num_pages, page_size, max_pages, scale);
    kp.base.q = static_cast<const uint16_t*>(q);
    kp.base.kv_cache = static_cast<const uint16_t*>(cache);
    mla::capi::set_split(kp.base, num_parts, workspace, workspace_bytes);
    kp.format = f;
    if (f == Kv4Format::Codebook)
      for (int i = 0; i < 16; ++i) kp.levels[i] = levels[i];
    mla::kernels::mla_decode_kv4(kp, static_cast<cudaStream_t>(stream));
  });
}

// kernels::kv4_cache_append on `stream`: kv_new [batch, n_new, d_c + d_r] bf16 written at
// positions[b] .. positions[b] + n_new - 1 of each request's pages (FP4: the Round rule with the
// scale constant c). 0 on success, else 1 with the message in err.
int mla_kv4_capi_append(int format, float c, const float* levels, const void* kv_new, const int32_t* positions,
                        const int32_t* page_table, void* cache, int batch, int n_new, int d_c, int d_r, int max_pages,
                        int num_pages, int page_size, void* stream, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    auto p = mla::capi::append_params<mla::kernels::Kv4AppendParams>(kv_new, positions, page_table, cache, batch, n_new,
                                                                      d_c, d_r, max_pages, num_pages, page_size);
    p.format = kv4_format(format, levels);
    p.c = c;
    if (p.format == Kv4Format::Codebook)
      for (int i = 0; i < 16; ++i) p.levels[i] = levels[i];
    mla::kernels::kv4_cache_append(p, static_cast<cudaStream_t>(stream));
  });
}

// The CPU twins on host buffers, the references of the Python package's device check
// (python/tests/check_kv_package_gpu.py):
// the append (quant::fp4_cache_append_twin with the Round rule and c, or
// quant::codebook_cache_append_twin), with mla_kv4_capi_append's arguments less the stream;
int mla_kv4_capi_append_twin(int format, float c, const float* levels, const void* kv_new, const int32_t* positions,
                             const int32_t* page_table, void* cache, int batch, int n_new, int d_c, int d_r,
                             int max_pages, int num_pages, int page_size, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    const auto* kv = static_cast<const uint16_t*>(kv_new);
    auto* pages = static_cast<uint8_t*>(cache);
    if (kv4_format(format, levels) == Kv4Format::Fp4)
      mla::quant::fp4_cache_append_twin(mla::quant::Fp4CacheLayout{page_size, d_c, d_r},
                                        mla::quant::Fp4CacheEncoding{mla::quant::Fp4ScaleRule::Round, c}, kv, batch,
                                        n_new, positions, page_table, max_pages, pages, num_pages);
    else
      mla::quant::codebook_cache_append_twin(mla::quant::CodebookCacheLayout{page_size, d_c, d_r},
                                             codebook_table(levels), kv, batch, n_new, positions, page_table,
                                             max_pages, pages, num_pages);
  });
}

// every page dequantised to a BF16 paged cache bf16_cache [num_pages, page_size, d_c + d_r]
// (quant::fp4_cache_to_bf16 / codebook_cache_to_bf16: the BF16 route's twin is the BF16 decode
// twin on it, mla_decode_capi_twin);
int mla_kv4_capi_to_bf16_twin(int format, const float* levels, const void* cache, int num_pages, int page_size, int d_c,
                              int d_r, void* bf16_cache, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    const auto* pages = static_cast<const uint8_t*>(cache);
    auto* out = static_cast<uint16_t*>(bf16_cache);
    if (kv4_format(format, levels) == Kv4Format::Fp4)
      mla::quant::fp4_cache_to_bf16(mla::quant::Fp4CacheLayout{page_size, d_c, d_r}, pages, num_pages, out);
    else
      mla::quant::codebook_cache_to_bf16(mla::quant::CodebookCacheLayout{page_size, d_c, d_r}, codebook_table(levels),
                                         pages, num_pages, out);
  });
}

// The narrow FP8 split kernel's event timeline as run by the FP4 cache's FP8 route (route 1 at
// <= 32 rows; kernels/timeline.cuh, a build with -DMLA_TIMELINE=ON only, else an error): host ==
// nullptr clears it, else copies it out. This library's own copy of the kernel's event buffer,
// hence a reader here beside mla_fp8_capi's. tools/mla-bench/timeline.py --kernel fp4-narrow reads it.
int mla_kv4_capi_narrow_timeline(void* host, void* stream, char* err, size_t err_len) {
  return MLA_CAPI_READ_TIMELINE(mla::kernels::fp8::narrow_timeline);
}

// The same for the 64-row FP8 split kernel (route 1 at > 32 rows): timeline.py --kernel fp4-rows64.
int mla_kv4_capi_rows64_timeline(void* host, void* stream, char* err, size_t err_len) {
  return MLA_CAPI_READ_TIMELINE(mla::kernels::fp8::rows64_timeline);
}

// FP4 pages rewritten as FP8 pages with the same ids (quant::fp4_cache_to_fp8: the FP8 route's
// twin is the FP8 decode twin on them, mla_fp8_capi_twin).
int mla_kv4_capi_fp4_to_fp8_twin(const void* cache, int num_pages, int page_size, int d_c, int d_r, void* fp8_cache,
                                 char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    mla::quant::fp4_cache_to_fp8(mla::quant::Fp4CacheLayout{page_size, d_c, d_r}, static_cast<const uint8_t*>(cache),
                                 num_pages, static_cast<uint8_t*>(fp8_cache));
  });
}

}  // extern "C"
