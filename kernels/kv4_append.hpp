#pragma once
// 4-bit cache encodings on the GPU (formats: quant/fp4_cache_format.hpp and
// quant/codebook_cache_format.hpp, docs/formats/kv-fp4.md), bit-exact with their CPU twins
// (quant::fp4_cache_append_twin, quant::codebook_cache_append_twin): kv_new [batch, n_new,
// d_c + d_r] bf16 -> the 4-bit pages of positions positions[b] .. positions[b] + n_new - 1.
// FP4 uses the Round scale rule with the layer's constant c (the rule of the product; the
// OCP-floor and RCEIL rules exist for the calibration study on the CPU only). A page id out of
// range or a position past max_pages * page_size is bad device data: the token is skipped and
// *error_flag (optional) set to 1. One launch, no allocation (graph capturable).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kv4_decode.hpp"

namespace mla::kernels {

struct Kv4AppendParams {
  const uint16_t* kv_new = nullptr;     // [batch, n_new, d_c + d_r] bf16 bits
  const int32_t* positions = nullptr;   // [batch]
  const int32_t* page_table = nullptr;  // [batch, max_pages]
  uint8_t* cache = nullptr;             // [num_pages, page bytes]
  int* error_flag = nullptr;            // optional device int
  int batch = 0, n_new = 0, d_c = 0, d_r = 0, max_pages = 0, num_pages = 0, page_size = 0;
  Kv4Format format = Kv4Format::Fp4;
  float c = 0.156f;       // FP4: the scale constant of the Round rule
  float levels[16] = {};  // codebook: the layer's table in per-token RMS units, ascending
};

// Host checks (mla::InputError naming the field and value), then one launch on `stream`.
void kv4_cache_append(const Kv4AppendParams& p, cudaStream_t stream);

}  // namespace mla::kernels
