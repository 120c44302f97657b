#include "verify/shared_prefix_backend.hpp"

#include "core/error.hpp"
#include "quant/prefix_twin_bf16.hpp"

namespace mla::verify {
namespace {

quant::PrefixDecompressParams decompress_params(SharedPrefixStep& s) {
  quant::PrefixDecompressParams p;
  p.kv_cache = s.cache.data();
  p.page_table = s.prefix_table.data();
  p.kv_b = s.kv_b.data();
  p.k = s.k.data();
  p.v = s.v.data();
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

void size_outputs(SharedPrefixStep& s) {
  s.k.resize(static_cast<size_t>(s.prefix_len) * s.heads * (s.d_n + s.d_r));
  s.v.resize(static_cast<size_t>(s.prefix_len) * s.heads * s.d_v);
}

}  // namespace

void shared_prefix_decompress(SharedPrefixStep& s, const std::string& device) {
  if (device == "cuda") return shared_prefix_decompress_cuda(s);
  size_outputs(s);
  quant::prefix_decompress_twin_bf16(decompress_params(s));
}

void shared_prefix_decode(SharedPrefixStep& s, const std::string& device) {
  if (device == "cuda") return shared_prefix_decode_cuda(s);
  std::vector<uint16_t> o_lat(static_cast<size_t>(s.batch) * s.heads * s.d_c);
  std::vector<float> lse_lat(static_cast<size_t>(s.batch) * s.heads);
  s.out.resize(static_cast<size_t>(s.batch) * s.heads * s.d_v);
  s.lse.resize(static_cast<size_t>(s.batch) * s.heads);
  quant::MixedDecodeParams p;
  quant::Bf16DecodeParams& d = p.suffix;
  d.q = s.q_abs.data();
  d.kv_cache = s.cache.data();
  d.page_table = s.own_table.data();
  d.seqlens = s.own_len.data();
  d.out = o_lat.data();
  d.lse = lse_lat.data();
  d.batch = s.batch;
  d.heads = s.heads;
  d.d_c = s.d_c;
  d.d_r = s.d_r;
  d.num_pages = s.num_pages;
  d.page_size = s.page_size;
  d.max_pages = s.own_max_pages;
  d.scale = s.scale;
  p.q_naive = s.q_naive.data();
  p.prefix_k = s.k.data();
  p.prefix_v = s.v.data();
  p.prefix_len = s.prefix_len;
  p.kv_b = s.kv_b.data();
  p.d_n = s.d_n;
  p.d_v = s.d_v;
  p.out = s.out.data();
  p.lse = s.lse.data();
  p.b_theta = 0.0;  // always the mixed path: it is what is verified
  quant::mixed_decode_twin_bf16(p);
}

}  // namespace mla::verify
