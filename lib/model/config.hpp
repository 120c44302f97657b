#pragma once
// MLA model configuration, parsed from a Hugging Face config.json (DeepSeek-V2/V2-Lite with
// q_lora_rank null, DeepSeek-V3/R1/V3.1, Kimi-K2, and any model_type with the same keys).
// Accepts `rope_theta` + `rope_scaling` at top level and the transformers 5.x
// `rope_parameters` object. See shared SPEC section 1.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mla::model {

struct YarnScaling {
  double factor = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;  // 0: not set
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

struct MlaConfig {
  std::string model_type;        // "deepseek_v2", "deepseek_v3", "kimi_k2", ...
  int64_t hidden_size = 0;       // D
  int64_t num_heads = 0;         // H
  int64_t q_lora_rank = 0;       // 0 when null (V2 / V2-Lite)
  int64_t kv_lora_rank = 0;      // d_c
  int64_t qk_nope_head_dim = 0;  // d_n
  int64_t qk_rope_head_dim = 0;  // d_r
  int64_t v_head_dim = 0;        // d_v
  int64_t num_hidden_layers = 0;
  int64_t first_k_dense_replace = 0;
  int64_t num_nextn_predict_layers = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<YarnScaling> yarn;  // set when rope_scaling type is yarn
  bool rope_interleave = true;      // pairs (2i, 2i+1) vs half split; see docs/math.md
  // Keys read leniently, as transformers does (a key MLA does not use, a missing key given
  // the class default, a value transformers only warns about): one message each, naming the
  // key, the value and what was done. load_mla_config logs them; tools go on.
  std::vector<std::string> warnings;

  bool has_q_lora() const { return q_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // (d_n + d_r)^-0.5, times mscale^2 under YaRN when mscale_all_dim is set.
  double softmax_scale() const;
  // Layers holding MLA attention: the decoder layers plus the MTP layers.
  int64_t attention_layers() const { return num_hidden_layers + num_nextn_predict_layers; }
};

// What is refused (InputError naming the key, the value and why) is only what would change the
// computation or that the attention cannot compute: a rope type other than yarn/default, YaRN
// `truncate: false` or `attention_factor`, `attention_bias: true`, odd qk_rope_head_dim,
// contradicting RoPE facts. For model_type deepseek_v2 / deepseek_v3 a missing key takes
// transformers' class default (DeepseekV2Config / DeepseekV3Config, transformers 5.x), with a
// warning; other model types need every dimension key. docs/formats/checkpoint.md lists the rules.
// `source` names the file in error messages.
MlaConfig parse_mla_config(const nlohmann::json& j, const std::string& source);
MlaConfig load_mla_config(const std::filesystem::path& config_json);  // logs the warnings
// Logs each of c.warnings (spdlog warn).
void log_config_warnings(const MlaConfig& c);

}  // namespace mla::model
