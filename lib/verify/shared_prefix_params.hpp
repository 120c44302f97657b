#pragma once
// The prefix kernels' parameters for one SharedPrefixStep: the CPU twins' backend
// (shared_prefix_backend.cpp) and the CUDA one (shared_prefix_backend_cuda.cpp) fill them alike and
// differ only in where the buffers live (host vectors or device copies), so the shapes are set here.
#include <cstdint>

#include "quant/prefix_twin_bf16.hpp"
#include "verify/shared_prefix_backend.hpp"

namespace mla::verify {

// Decompress step: s's prefix pages (cache, prefix_table) and kv_b into k and v.
inline quant::PrefixDecompressParams prefix_decompress_params(const SharedPrefixStep& s, const uint16_t* cache,
                                                              const int32_t* prefix_table, const uint16_t* kv_b,
                                                              uint16_t* k, uint16_t* v) {
  quant::PrefixDecompressParams p;
  p.kv_cache = cache;
  p.page_table = prefix_table;
  p.kv_b = kv_b;
  p.k = k;
  p.v = v;
  p.prefix_len = s.prefix_len;
  p.num_pages = s.num_pages;
  p.page_size = s.page_size;
  p.max_pages = s.prefix_pages;
  p.heads = s.heads;
  p.d_c = s.d_c;
  p.d_r = s.d_r;
  p.d_n = s.d_n;
  p.d_v = s.d_v;
  return p;
}

// The buffers of one mixed decode step (each the same-named SharedPrefixStep field, or a copy of
// it; o_lat / lse_lat: the absorbed part's scratch, [batch, heads, d_c] / [batch, heads]).
struct MixedStepBuffers {
  const uint16_t *q_abs, *cache;
  const int32_t *own_table, *own_len;
  uint16_t* o_lat;
  float* lse_lat;
  const uint16_t *q_naive, *k, *v, *kv_b;
  uint16_t* out;
  float* lse;
};

// Mixed step (naive prefix + absorbed own pages + merge, s_q = 1), always the mixed path
// (b_theta 0: it is what is verified). Workspaces are the caller's (the GPU's only).
inline quant::MixedDecodeParams mixed_decode_params(const SharedPrefixStep& s, const MixedStepBuffers& b) {
  quant::MixedDecodeParams p;
  quant::Bf16DecodeParams& d = p.suffix;
  d.q = b.q_abs;
  d.kv_cache = b.cache;
  d.page_table = b.own_table;
  d.seqlens = b.own_len;
  d.out = b.o_lat;
  d.lse = b.lse_lat;
  d.batch = s.batch;
  d.heads = s.heads;
  d.d_c = s.d_c;
  d.d_r = s.d_r;
  d.num_pages = s.num_pages;
  d.page_size = s.page_size;
  d.max_pages = s.own_max_pages;
  d.scale = s.scale;
  p.q_naive = b.q_naive;
  p.prefix_k = b.k;
  p.prefix_v = b.v;
  p.prefix_len = s.prefix_len;
  p.kv_b = b.kv_b;
  p.d_n = s.d_n;
  p.d_v = s.d_v;
  p.out = b.out;
  p.lse = b.lse;
  p.b_theta = 0.0;
  return p;
}

}  // namespace mla::verify
