// Attention weights of one layer from a checkpoint (tensor names of SPEC section 1). A local
// loader so calibration does not wait on io::load_attention_weights; same float64 result.
#include "calibration/model_weights.hpp"

namespace mla::calib {

model::AttentionWeights load_layer_weights(const io::Checkpoint& ckpt, int64_t layer) {
  const auto& cfg = ckpt.config();
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  auto vec = [&](const std::string& n) {
    const auto v = ckpt.load_f64(p + n);
    return VectorD(Eigen::Map<const VectorD>(v.data(), static_cast<Eigen::Index>(v.size())));
  };
  model::AttentionWeights w;
  if (cfg.has_q_lora()) {
    w.q_a_proj = ckpt.load_matrix(p + "q_a_proj.weight");
    w.q_a_layernorm = vec("q_a_layernorm.weight");
    w.q_b_proj = ckpt.load_matrix(p + "q_b_proj.weight");
  } else {
    w.q_proj = ckpt.load_matrix(p + "q_proj.weight");
  }
  w.kv_a_proj_with_mqa = ckpt.load_matrix(p + "kv_a_proj_with_mqa.weight");
  w.kv_a_layernorm = vec("kv_a_layernorm.weight");
  w.kv_b_proj = ckpt.load_matrix(p + "kv_b_proj.weight");
  w.o_proj = ckpt.load_matrix(p + "o_proj.weight");
  w.validate(cfg);
  return w;
}

}  // namespace mla::calib
