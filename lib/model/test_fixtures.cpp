#include "model/test_fixtures.hpp"

#include <cmath>
#include <random>

namespace mla::model {

namespace {

// Uniform in [-1, 1) from 53 random bits: identical on every platform, unlike
// std::uniform_real_distribution whose algorithm is implementation-defined.
double uniform_pm1(std::mt19937_64& gen) {
  return static_cast<double>(gen() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

MatrixR fill(std::mt19937_64& gen, int64_t rows, int64_t cols, double amplitude) {
  MatrixR m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = amplitude * uniform_pm1(gen);
  return m;
}

VectorD fill_gamma(std::mt19937_64& gen, int64_t n) {
  VectorD v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 1.0 + 0.5 * uniform_pm1(gen);
  return v;
}

}  // namespace

MatrixR random_matrix(int64_t rows, int64_t cols, uint64_t seed, double amplitude) {
  std::mt19937_64 gen(seed);
  return fill(gen, rows, cols, amplitude);
}

AttentionWeights random_attention_weights(const MlaConfig& cfg, uint64_t seed) {
  std::mt19937_64 gen(seed);
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d_c = cfg.kv_lora_rank;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  // amplitude sqrt(3/fan_in): unit variance outputs for unit variance inputs.
  auto amp = [](int64_t fan_in) { return std::sqrt(3.0 / static_cast<double>(fan_in)); };
  AttentionWeights w;
  if (cfg.has_q_lora()) {
    w.q_a_proj = fill(gen, cfg.q_lora_rank, D, amp(D));
    w.q_a_layernorm = fill_gamma(gen, cfg.q_lora_rank);
    w.q_b_proj = fill(gen, H * (d_n + d_r), cfg.q_lora_rank, amp(cfg.q_lora_rank));
  } else {
    w.q_proj = fill(gen, H * (d_n + d_r), D, amp(D));
  }
  w.kv_a_proj_with_mqa = fill(gen, d_c + d_r, D, amp(D));
  w.kv_a_layernorm = fill_gamma(gen, d_c);
  w.kv_b_proj = fill(gen, H * (d_n + d_v), d_c, amp(d_c));
  w.o_proj = fill(gen, D, H * d_v, amp(H * d_v));
  return w;
}

MlaConfig test_config_v2_style() {
  MlaConfig c;
  c.model_type = "deepseek_v2";
  c.hidden_size = 64;
  c.num_heads = 4;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 12;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.num_hidden_layers = 1;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.rope_interleave = true;
  return c;
}

MlaConfig test_config_v3_style() {
  MlaConfig c;
  c.model_type = "deepseek_v3";
  c.hidden_size = 96;
  c.num_heads = 4;
  c.q_lora_rank = 48;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 12;
  c.num_hidden_layers = 1;
  c.max_position_embeddings = 2560;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.rope_interleave = true;
  YarnScaling y;
  y.factor = 40.0;
  y.mscale = 1.0;
  y.mscale_all_dim = 1.0;
  y.original_max_position_embeddings = 64;
  y.beta_fast = 32.0;
  y.beta_slow = 1.0;
  c.yarn = y;
  return c;
}

}  // namespace mla::model
