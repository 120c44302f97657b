#pragma once
// FP8 cache encodings on the GPU (format: quant/fp8_cache_format.hpp, docs/formats/kv-fp8.md),
// bit-exact with their CPU twins (quant::fp8_cache_append_twin, quant::fp8_quantize_query_twin):
//   fp8_cache_append:    kv_new [batch, n_new, d_c + d_r] bf16 -> the FP8 pages of positions
//                        positions[b] .. positions[b] + n_new - 1 (per-token scale, RoPE / s).
//   fp8_quantize_query:  q [rows, d_c + d_r] bf16 -> q8 [rows, d_c] e4m3, q_rope [rows, d_r] bf16
//                        (/ s_q), q_scale [rows] fp32; rows = batch * s_q * heads.
// A page id out of range or a position past max_pages * page_size is bad device data: the token
// is skipped and *error_flag (optional) set to 1. One launch each, no allocation (graph capturable).
#include <cuda_runtime.h>

#include <cstdint>

namespace mla::kernels {

struct Fp8AppendParams {
  const uint16_t* kv_new = nullptr;     // [batch, n_new, d_c + d_r] bf16 bits
  const int32_t* positions = nullptr;   // [batch]
  const int32_t* page_table = nullptr;  // [batch, max_pages]
  uint8_t* cache = nullptr;             // [num_pages, page bytes]
  int* error_flag = nullptr;            // optional device int
  int batch = 0, n_new = 0, d_c = 0, d_r = 0, max_pages = 0, num_pages = 0, page_size = 0;
};

// Host checks (mla::InputError naming the field), then one launch on `stream`.
void fp8_cache_append(const Fp8AppendParams& p, cudaStream_t stream);

void fp8_quantize_query(const uint16_t* q, int rows, int d_c, int d_r, uint8_t* q8, uint16_t* q_rope, float* q_scale,
                        cudaStream_t stream);

}  // namespace mla::kernels
