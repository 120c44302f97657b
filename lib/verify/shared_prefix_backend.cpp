#include "verify/shared_prefix_backend.hpp"

#include "core/error.hpp"
#include "quant/prefix_twin_bf16.hpp"
#include "verify/shared_prefix_params.hpp"

namespace mla::verify {
namespace {

void size_outputs(SharedPrefixStep& s) {
  s.k.resize(static_cast<size_t>(s.prefix_len) * s.heads * (s.d_n + s.d_r));
  s.v.resize(static_cast<size_t>(s.prefix_len) * s.heads * s.d_v);
}

}  // namespace

void shared_prefix_decompress(SharedPrefixStep& s, const std::string& device) {
  if (device == "cuda") return shared_prefix_decompress_cuda(s);
  size_outputs(s);
  quant::prefix_decompress_twin_bf16(
      prefix_decompress_params(s, s.cache.data(), s.prefix_table.data(), s.kv_b.data(), s.k.data(), s.v.data()));
}

void shared_prefix_decode(SharedPrefixStep& s, const std::string& device) {
  if (device == "cuda") return shared_prefix_decode_cuda(s);
  std::vector<uint16_t> o_lat(static_cast<size_t>(s.batch) * s.heads * s.d_c);
  std::vector<float> lse_lat(static_cast<size_t>(s.batch) * s.heads);
  s.out.resize(static_cast<size_t>(s.batch) * s.heads * s.d_v);
  s.lse.resize(static_cast<size_t>(s.batch) * s.heads);
  const quant::MixedDecodeParams p =
      mixed_decode_params(s, {s.q_abs.data(), s.cache.data(), s.own_table.data(), s.own_len.data(), o_lat.data(),
                              lse_lat.data(), s.q_naive.data(), s.k.data(), s.v.data(), s.kv_b.data(), s.out.data(),
                              s.lse.data()});
  quant::mixed_decode_twin_bf16(p);
}

}  // namespace mla::verify
