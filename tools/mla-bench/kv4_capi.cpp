// C entry points to the 4-bit cache decode, for the peer benchmark driven from Python (ctypes,
// tools/mla-bench/peer_kv4.py): ours and FlashMLA's BF16 dense decode run in one process on
// caches holding the same values. Not a product interface: the C++ API is kernels/kv4_decode.hpp.
#include <exception>

#include "capi_common.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/fp8_decode.hpp"
#include "kernels/kv4_decode.hpp"

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

// The decode on `stream` (format 0 = FP4, 1 = codebook with `levels`[16]; route as above, the
// FP8 route for FP4 only); 0 on success, else 1 with the message in err. mode (FP8 route only,
// mla::capi::PlanMode): 0 the decode schedules itself, 1 fp8_decode_plan only, 2 a planned decode.
int mla_kv4_capi_run(int route, int format, const float* levels, const void* q, const void* cache, const int32_t* page_table,
                     const int32_t* seqlens, void* out, float* lse, int batch, int s_q, int heads, int d_c, int d_r,
                     int num_pages, int page_size, int max_pages, float scale, int num_parts, void* workspace,
                     size_t workspace_bytes, int mode, void* stream, char* err, size_t err_len) {
  return mla::capi::report_errors(err, err_len, [&] {
    if (route == 1) {
      auto f = mla::capi::decode_params<mla::quant::Fp8DecodeParams>(page_table, seqlens, out, lse, batch, s_q, heads,
                                                                     d_c, d_r, num_pages, page_size, max_pages, scale);
      f.cache = static_cast<const uint8_t*>(cache);
      mla::capi::set_split(f, num_parts, workspace, workspace_bytes);
      if (mla::capi::plan_or_mark(f, mode, static_cast<cudaStream_t>(stream))) return;
      mla::kernels::fp8_decode_fp4_cache_bf16q(f, static_cast<const uint16_t*>(q), static_cast<cudaStream_t>(stream));
      return;
    }
    if (mode != 0) throw mla::InputError("kv4 capi: mode = " + std::to_string(mode) + " (plans exist for route 1 only)");
    mla::kernels::Kv4DecodeParams kp;
    kp.base = mla::capi::decode_params<mla::quant::Bf16DecodeParams>(page_table, seqlens, out, lse, batch, s_q, heads,
                                                                     d_c, d_r, num_pages, page_size, max_pages, scale);
    kp.base.q = static_cast<const uint16_t*>(q);
    kp.base.kv_cache = static_cast<const uint16_t*>(cache);
    mla::capi::set_split(kp.base, num_parts, workspace, workspace_bytes);
    kp.format = format == 1 ? mla::kernels::Kv4Format::Codebook : mla::kernels::Kv4Format::Fp4;
    if (levels != nullptr)
      for (int i = 0; i < 16; ++i) kp.levels[i] = levels[i];
    mla::kernels::mla_decode_kv4(kp, static_cast<cudaStream_t>(stream));
  });
}

}  // extern "C"
