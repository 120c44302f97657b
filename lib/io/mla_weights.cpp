#include "io/mla_weights.hpp"

#include <string>

#include "core/error.hpp"

namespace mla::io {

model::AttentionWeights load_attention_weights(const Checkpoint& ckpt, int64_t layer) {
  const model::MlaConfig& cfg = ckpt.config();
  if (layer < 0 || layer >= cfg.attention_layers())
    throw InputError(ckpt.dir().string() + ": attention layer " + std::to_string(layer) + " is out of range [0, " +
                     std::to_string(cfg.attention_layers()) + ")");
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  auto matrix = [&](const char* t) {
    const std::string name = p + t;
    if (!ckpt.has(name)) throw InputError(ckpt.dir().string() + ": tensor '" + name + "' is missing");
    return ckpt.load_matrix(name);
  };
  auto vector = [&](const char* t) -> VectorD {
    const MatrixR m = matrix(t);
    if (m.rows() != 1)
      throw InputError(ckpt.dir().string() + ": tensor '" + p + t + "' is 2-D [" + std::to_string(m.rows()) + ", " +
                       std::to_string(m.cols()) + "], expected a vector");
    return m.row(0).transpose();
  };
  model::AttentionWeights w;
  if (cfg.has_q_lora()) {
    if (ckpt.has(p + "q_proj.weight"))
      throw InputError(ckpt.dir().string() + ": tensor '" + p + "q_proj.weight' present although config.json sets q_lora_rank " +
                       std::to_string(cfg.q_lora_rank));
    w.q_a_proj = matrix("q_a_proj.weight");
    w.q_a_layernorm = vector("q_a_layernorm.weight");
    w.q_b_proj = matrix("q_b_proj.weight");
  } else {
    w.q_proj = matrix("q_proj.weight");
  }
  w.kv_a_proj_with_mqa = matrix("kv_a_proj_with_mqa.weight");
  w.kv_a_layernorm = vector("kv_a_layernorm.weight");
  w.kv_b_proj = matrix("kv_b_proj.weight");
  w.o_proj = matrix("o_proj.weight");
  w.validate(cfg);  // shape check against the config, naming the tensor
  return w;
}

model::DenseModel load_dense_model(const Checkpoint& ckpt) {
  const auto& j = ckpt.config_json();
  const bool tied = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean() &&
                    j["tie_word_embeddings"].get<bool>() && !ckpt.has("lm_head.weight");
  return model::load_dense_model(ckpt.config(), [&](const std::string& name) { return ckpt.load_matrix(name); }, tied);
}

}  // namespace mla::io
