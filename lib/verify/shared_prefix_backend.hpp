#pragma once
// Where verify-decode --shared-prefix runs the mixed (TyphoonMLA) decode step: the CUDA kernels
// (kernels/prefix_attention.hpp) or their CPU twins (quant/prefix_twin_bf16.hpp), on the same
// host buffers. The CUDA side uploads the problem, runs, and downloads the output each call
// (the tiny models' buffers are small).
#include <cstdint>
#include <string>
#include <vector>

namespace mla::verify {

// One decode step of B requests sharing a prefix, in host memory (bf16 bits).
struct SharedPrefixStep {
  int batch = 0, heads = 0, d_c = 0, d_r = 0, d_n = 0, d_v = 0, page_size = 64, num_pages = 0;
  int prefix_len = 0, prefix_pages = 0, own_max_pages = 0;
  float scale = 0.f;
  std::vector<uint16_t> cache;        // [num_pages, page_size, d_c + d_r]
  std::vector<int32_t> prefix_table;  // [prefix_pages]
  std::vector<int32_t> own_table;     // [batch, own_max_pages]
  std::vector<int32_t> own_len;       // [batch]
  std::vector<uint16_t> kv_b;         // [heads * (d_n + d_v), d_c]
  std::vector<uint16_t> q_naive;      // [batch, 1, heads, d_n + d_r]
  std::vector<uint16_t> q_abs;        // [batch, 1, heads, d_c + d_r]
  std::vector<uint16_t> k, v;         // decompressed prefix (filled by decompress)
  std::vector<uint16_t> out;          // [batch, 1, heads, d_v]
  std::vector<float> lse;             // [batch, 1, heads]
};

// Fills step.k / step.v from the prefix pages (decompress step).
void shared_prefix_decompress(SharedPrefixStep& step, const std::string& device);
// One mixed step (naive prefix + absorbed own pages + merge; s_q = 1): fills out and lse.
void shared_prefix_decode(SharedPrefixStep& step, const std::string& device);

// CUDA implementations (shared_prefix_backend_cuda.cpp); throw mla::Error without CUDA.
void shared_prefix_decompress_cuda(SharedPrefixStep& step);
void shared_prefix_decode_cuda(SharedPrefixStep& step);

}  // namespace mla::verify
