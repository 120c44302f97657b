// A C entry point to the BF16 decode launcher, for peer benchmarks driven from Python (ctypes,
// tools/mla-bench/peer_flashmla.py): FlashMLA and this kernel then run in one process, on the
// same device tensors (queries, cache, page table, lengths) and the same stream, interleaved.
// Also the one ABI behind the Python package python/mla_toolchain (ctypes; docs/python.md): keep
// these signatures stable, add new entry points beside them. The C++ API is kernels/mla_decode.hpp.
#include <exception>

#include "capi_common.hpp"
#include "kernels/mla_decode.hpp"
#ifdef MLA_TIMELINE
#include "kernels/decode_launch.hpp"
#endif

namespace {
mla::kernels::Bf16DecodeParams make_params(const void* q, const void* kv_cache, const int32_t* page_table,
                                           const int32_t* seqlens, void* out, float* lse, int batch, int s_q,
                                           int heads, int d_c, int d_r, int num_pages, int page_size, int max_pages,
                                           float scale, int variant) {
  auto p = mla::capi::decode_params<mla::kernels::Bf16DecodeParams>(page_table, seqlens, out, lse, batch, s_q, heads, d_c,
                                                                    d_r, num_pages, page_size, max_pages, scale);
  p.q = static_cast<const uint16_t*>(q);
  p.kv_cache = static_cast<const uint16_t*>(kv_cache);
  p.variant = variant;
  return p;
}
// The three GPU entry points below: a call with its scheduler, the plan alone, a planned call.
enum class Call { Run, Plan, RunPlanned };
int decode_call(Call c, const void* q, const void* kv_cache, const int32_t* page_table, const int32_t* seqlens,
                void* out, float* lse, int batch, int s_q, int heads, int d_c, int d_r, int num_pages, int page_size,
                int max_pages, float scale, int variant, int num_parts, void* workspace, size_t workspace_bytes,
                void* stream, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    auto p = make_params(q, kv_cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c, d_r, num_pages, page_size,
                         max_pages, scale, variant);
    mla::capi::set_split(p, num_parts, workspace, workspace_bytes);
    p.planned = c == Call::RunPlanned;
    if (c == Call::Plan) mla::kernels::mla_decode_bf16_plan(p, static_cast<cudaStream_t>(stream));
    else mla::kernels::mla_decode_bf16(p, static_cast<cudaStream_t>(stream));
  });
}
}  // namespace

extern "C" {

// Parts the launcher uses for this shape on the current device (0 on error), and the workspace
// bytes it needs with that many parts.
int mla_decode_capi_parts(int batch, int s_q, int heads, int d_c, int d_r, int variant, size_t* workspace_bytes) {
  try {
    auto p = make_params(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, batch, s_q, heads, d_c, d_r, 1, 64, 1,
                         1.f, variant);
    p.num_parts = mla::kernels::decode_parts_for_device(p);
    *workspace_bytes = mla::kernels::decode_workspace_bytes_for(p);
    return p.num_parts;
  } catch (const std::exception&) {
    return 0;
  }
}

// mla::kernels::mla_decode_bf16 on `stream` (a cudaStream_t); 0 on success, else 1 with the
// error's message in err.
int mla_decode_capi_run(const void* q, const void* kv_cache, const int32_t* page_table, const int32_t* seqlens,
                        void* out, float* lse, int batch, int s_q, int heads, int d_c, int d_r, int num_pages,
                        int page_size, int max_pages, float scale, int variant, int num_parts, void* workspace,
                        size_t workspace_bytes, void* stream, char* err, size_t err_len) {
  return decode_call(Call::Run, q, kv_cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c, d_r, num_pages,
                     page_size, max_pages, scale, variant, num_parts, workspace, workspace_bytes, stream, err, err_len);
}

// mla::kernels::mla_decode_bf16_plan with mla_decode_capi_run's arguments (the schedule into the
// workspace), and the planned call that then launches no scheduler: what a serving step does
// once per step and once per layer (FlashMLA's get_mla_metadata and flash_mla_with_kvcache).
int mla_decode_capi_plan(const void* q, const void* kv_cache, const int32_t* page_table, const int32_t* seqlens,
                         void* out, float* lse, int batch, int s_q, int heads, int d_c, int d_r, int num_pages,
                         int page_size, int max_pages, float scale, int variant, int num_parts, void* workspace,
                         size_t workspace_bytes, void* stream, char* err, size_t err_len) {
  return decode_call(Call::Plan, q, kv_cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c, d_r, num_pages,
                     page_size, max_pages, scale, variant, num_parts, workspace, workspace_bytes, stream, err, err_len);
}
int mla_decode_capi_run_planned(const void* q, const void* kv_cache, const int32_t* page_table,
                                const int32_t* seqlens, void* out, float* lse, int batch, int s_q, int heads, int d_c,
                                int d_r, int num_pages, int page_size, int max_pages, float scale, int variant,
                                int num_parts, void* workspace, size_t workspace_bytes, void* stream, char* err,
                                size_t err_len) {
  return decode_call(Call::RunPlanned, q, kv_cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c, d_r,
                     num_pages, page_size, max_pages, scale, variant, num_parts, workspace, workspace_bytes, stream, err,
                     err_len);
}

// The CPU twin (quant::decode_twin_bf16) on host buffers with the same arguments as
// mla_decode_capi_run (num_parts as the GPU used, so the split points match): the reference the
// Python package's device check compares against. 0 on success, else 1 with the message in err.
int mla_decode_capi_twin(const void* q, const void* kv_cache, const int32_t* page_table, const int32_t* seqlens,
                         void* out, float* lse, int batch, int s_q, int heads, int d_c, int d_r, int num_pages,
                         int page_size, int max_pages, float scale, int variant, int num_parts, char* err,
                         size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    auto p = make_params(q, kv_cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c, d_r, num_pages, page_size,
                         max_pages, scale, variant);
    p.num_parts = num_parts;
    mla::quant::decode_twin_bf16(p);
  });
}

// The v6 kernel's event timeline (kernels/timeline.cuh; a build with -DMLA_TIMELINE=ON only, else an
// error): host == nullptr clears it, else copies timeline::kWarps x timeline::kEvents uint64 words
// out ((SM clock << 8) | event id; 0 = no event). tools/mla-bench/timeline.py reads it.
int mla_decode_capi_timeline(void* host, void* stream, char* err, size_t err_len) {
  return MLA_CAPI_READ_TIMELINE(mla::kernels::detail::v6_timeline);
}

}  // extern "C"
