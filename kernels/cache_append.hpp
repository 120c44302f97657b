#pragma once
// Paged cache append: writes n_new new tokens per request into their pages.
//   kv_new     [batch, n_new, dim] bf16      (dim = d_c + d_r, a multiple of 8)
//   positions  int32 [batch]                 position of kv_new[b][0] in request b
//   page_table int32 [batch, max_pages]
//   kv_cache   [num_pages, page_size, dim] bf16, written in place
// A page id out of range or a position past max_pages * page_size is bad device data: the
// token is skipped and *error_flag (optional) is set to 1. The CPU twin is
// quant::cache_append_twin_bf16.
#include <cuda_runtime.h>

#include <cstdint>

namespace mla::kernels {

struct CacheAppendParams {
  const uint16_t* kv_new = nullptr;     // [batch, n_new, dim] bf16 bits
  const int32_t* positions = nullptr;   // [batch]
  const int32_t* page_table = nullptr;  // [batch, max_pages]
  uint16_t* kv_cache = nullptr;         // [num_pages, page_size, dim] bf16 bits
  int* error_flag = nullptr;            // optional device int
  int batch = 0, n_new = 0, dim = 0, max_pages = 0, num_pages = 0, page_size = 0;
};

// Host checks (mla::InputError naming the field), then one launch on `stream`.
void cache_append_bf16(const CacheAppendParams& p, cudaStream_t stream);

}  // namespace mla::kernels
