// C entry points to the FP8 cache kernels, for the peer benchmark driven from Python (ctypes,
// tools/mla-bench/peer_fp8.py): ours, FlashMLA's BF16 dense and FP8 sparse decodes then run in
// one process on caches built from the same values. Also the ABI behind the Python package's FP8
// functions (python/mla_toolchain/kv_quant.py; docs/python.md): keep these signatures stable, add
// new entry points beside them. The C++ API is kernels/fp8_append.hpp and kernels/fp8_decode.hpp.
#include <exception>
#include <vector>

#include "capi_common.hpp"
#include "kernels/fp8_append.hpp"
#include "kernels/fp8_decode.hpp"
#ifdef MLA_TIMELINE
#include "kernels/decode_launch.hpp"
#endif
#include "quant/fp8_cache_format.hpp"

extern "C" {

// kernels::fp8_cache_append on `stream`; 0 on success, else 1 with the message in err.
int mla_fp8_capi_append(const void* kv_new, const int32_t* positions, const int32_t* page_table, void* cache, int batch,
                        int n_new, int d_c, int d_r, int max_pages, int num_pages, int page_size, void* stream, char* err,
                        size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    const auto p = mla::capi::append_params<mla::kernels::Fp8AppendParams>(kv_new, positions, page_table, cache, batch,
                                                                           n_new, d_c, d_r, max_pages, num_pages,
                                                                           page_size);
    mla::kernels::fp8_cache_append(p, static_cast<cudaStream_t>(stream));
  });
}

// Default parts for the shape on the current device (0 on error) and the workspace bytes
// fp8_decode_bf16q needs with them.
int mla_fp8_capi_parts(int batch, int s_q, int heads, int d_c, int d_r, size_t* workspace_bytes) {
  try {
    auto p = mla::capi::decode_shape<mla::quant::Fp8DecodeParams>(batch, s_q, heads, d_c, d_r);
    p.num_parts = mla::kernels::fp8_decode_parts_for_device(p);
    *workspace_bytes = mla::kernels::fp8_decode_workspace_bytes(p, true);
    return p.num_parts;
  } catch (const std::exception&) {
    return 0;
  }
}

// kernels::fp8_decode_bf16q (query quantisation + decode) on `stream`; 0 on success. mode
// (mla::capi::PlanMode): 0 the decode schedules itself, 1 fp8_decode_plan only, 2 a planned decode.
int mla_fp8_capi_run(const void* q, const void* cache, const int32_t* page_table, const int32_t* seqlens, void* out,
                     float* lse, int batch, int s_q, int heads, int d_c, int d_r, int num_pages, int page_size,
                     int max_pages, float scale, int num_parts, void* workspace, size_t workspace_bytes, int mode,
                     void* stream, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    auto p = mla::capi::decode_params<mla::quant::Fp8DecodeParams>(page_table, seqlens, out, lse, batch, s_q, heads, d_c,
                                                                   d_r, num_pages, page_size, max_pages, scale);
    p.cache = static_cast<const uint8_t*>(cache);
    mla::capi::set_split(p, num_parts, workspace, workspace_bytes);
    if (mla::capi::plan_or_mark(p, mode, static_cast<cudaStream_t>(stream))) return;
    mla::kernels::fp8_decode_bf16q(p, static_cast<const uint16_t*>(q), static_cast<cudaStream_t>(stream));
  });
}

// The CPU twins of the two entry points above on host buffers (same arguments, without the
// stream): quant::fp8_cache_append_twin, and quant::fp8_quantize_query_twin then
// quant::fp8_decode_twin with num_parts as the GPU used (so the split points match). The
// references of the Python package's device check (python/tests/check_kv_package_gpu.py).
int mla_fp8_capi_append_twin(const void* kv_new, const int32_t* positions, const int32_t* page_table, void* cache,
                             int batch, int n_new, int d_c, int d_r, int max_pages, int num_pages, int page_size,
                             char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    mla::quant::fp8_cache_append_twin(mla::quant::Fp8CacheLayout{page_size, d_c, d_r},
                                      static_cast<const uint16_t*>(kv_new), batch, n_new, positions, page_table,
                                      max_pages, static_cast<uint8_t*>(cache), num_pages);
  });
}

int mla_fp8_capi_twin(const void* q, const void* cache, const int32_t* page_table, const int32_t* seqlens, void* out,
                      float* lse, int batch, int s_q, int heads, int d_c, int d_r, int num_pages, int page_size,
                      int max_pages, float scale, int num_parts, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    auto p = mla::capi::decode_params<mla::quant::Fp8DecodeParams>(page_table, seqlens, out, lse, batch, s_q, heads, d_c,
                                                                   d_r, num_pages, page_size, max_pages, scale);
    mla::quant::validate_fp8_decode_schedule(p);  // the shape, before sizing the query buffers by it
    const size_t rows = static_cast<size_t>(batch) * s_q * heads;
    std::vector<uint8_t> q8(rows * d_c);
    std::vector<uint16_t> q_rope(rows * d_r);
    std::vector<float> q_scale(rows);
    mla::quant::fp8_quantize_query_twin(static_cast<const uint16_t*>(q), static_cast<int>(rows), d_c, d_r, q8.data(),
                                        q_rope.data(), q_scale.data());
    p.q8 = q8.data();
    p.q_rope = q_rope.data();
    p.q_scale = q_scale.data();
    p.cache = static_cast<const uint8_t*>(cache);
    p.num_parts = num_parts;
    mla::quant::fp8_decode_twin(p);
  });
}

// The FP8 64-row split kernel's event timeline (kernels/timeline.cuh; a build with
// -DMLA_TIMELINE=ON only, else an error): host == nullptr clears it, else copies
// timeline::kWarps x timeline::kEvents uint64 words out. tools/mla-bench/timeline.py reads it.
int mla_fp8_capi_timeline(void* host, void* stream, char* err, size_t err_len) {
  return MLA_CAPI_READ_TIMELINE(mla::kernels::fp8::rows64_timeline);
}

// The same for the narrow (<= 32 rows) FP8 split kernel.
int mla_fp8_capi_narrow_timeline(void* host, void* stream, char* err, size_t err_len) {
  return MLA_CAPI_READ_TIMELINE(mla::kernels::fp8::narrow_timeline);
}

}  // extern "C"
