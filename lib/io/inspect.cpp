#include "io/inspect.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.hpp"

namespace mla::io {

int64_t kv_bytes_per_token_layer(KvFormat format, int64_t w, int64_t d_r) {
  if (w <= 0 || d_r < 0) throw InputError("KV size: latent width " + std::to_string(w) + " / rope dim " + std::to_string(d_r) + " invalid");
  switch (format) {
    case KvFormat::BF16: return (w + d_r) * 2;
    case KvFormat::FP8: return w + 4 + 2 * d_r;
    case KvFormat::FP4:
      if (w % 32 != 0) throw InputError("KV size: FP4 needs a latent width that is a multiple of 32, got " + std::to_string(w));
      return w / 2 + w / 32 + 2 * d_r;
  }
  return 0;
}

std::string tensor_part(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (n.ends_with("_scale_inv")) return "scales";
  if (has("embed_tokens") || n == "lm_head.weight" || has("shared_head.head")) return "embeddings";
  if (has("norm.weight") || has("layernorm")) return "norms";
  if (has(".self_attn.")) return "attention";
  if (has(".mlp.experts.") || has(".mlp.shared_experts.") || has(".mlp.gate.")) return "moe";
  if (has(".mlp.")) return "mlp_dense";
  return "other";
}

std::map<std::string, int64_t> config_parameter_counts(const model::MlaConfig& c) {
  const int64_t D = c.hidden_size, H = c.num_heads, L = c.num_hidden_layers;
  const int64_t q = c.has_q_lora() ? c.q_lora_rank * D + H * c.qk_head_dim() * c.q_lora_rank
                                   : H * c.qk_head_dim() * D;
  const int64_t attention = q + (c.kv_lora_rank + c.qk_rope_head_dim) * D +
                            H * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank + D * H * c.v_head_dim;
  const int64_t norms = 2 * D + (c.has_q_lora() ? c.q_lora_rank : 0) + c.kv_lora_rank;
  const int64_t dense_layers = c.n_routed_experts > 0 ? std::min(c.first_k_dense_replace, L) : L;
  const int64_t moe_layer = c.n_routed_experts * (D + 3 * c.moe_intermediate_size * D) +
                            c.n_shared_experts * 3 * c.moe_intermediate_size * D;
  std::map<std::string, int64_t> p;
  p["attention"] = L * attention;
  p["norms"] = L * norms + D;
  p["embeddings"] = 2 * c.vocab_size * D;
  p["mlp_dense"] = dense_layers * 3 * c.intermediate_size * D;
  p["moe"] = (L - dense_layers) * moe_layer;
  int64_t total = 0;
  for (const auto& [_, n] : p) total += n;
  p["total"] = total;
  return p;
}

std::string family_name(const model::MlaConfig& c) {
  if (c.model_type == "deepseek_v2") return c.hidden_size == 2048 && c.num_heads == 16 ? "DeepSeek-V2-Lite" : "DeepSeek-V2";
  if (c.model_type == "deepseek_v3") return "DeepSeek-V3 / R1";
  if (c.model_type == "kimi_k2") return "Kimi-K2";
  return c.model_type + (c.has_q_lora() ? " (MLA, V3-style q LoRA)" : " (MLA, V2-style q_proj)");
}

InspectReport inspect_checkpoint(const Checkpoint& ckpt) {
  const model::MlaConfig& c = ckpt.config();
  InspectReport r;
  r.dir = ckpt.dir().string();
  r.family = family_name(c);
  r.config = c;
  if (ckpt.config_json().contains("kv_cache")) r.kv_cache_recorded = ckpt.config_json()["kv_cache"];
  for (const auto& f : ckpt.files()) {
    ++r.files;
    r.file_bytes += static_cast<int64_t>(std::filesystem::file_size(f));
  }
  for (const auto& part : {"attention", "mlp_dense", "moe", "embeddings", "norms", "other"}) r.params[part] = 0;
  for (const auto& name : ckpt.tensor_names()) {
    const TensorView v = ckpt.raw(name);
    ++r.tensors;
    auto& d = r.dtypes[std::string(dtype_name(v.dtype))];
    ++d.tensors;
    d.bytes += static_cast<int64_t>(v.bytes.size());
    const std::string part = tensor_part(name);
    if (part == "scales") {
      r.scale_elements += v.numel();
      continue;
    }
    if (v.dtype == DType::F8_E4M3) ++r.fp8_weights;
    r.params[part] += v.numel();
    r.total_params += v.numel();
  }
  r.config_params = config_parameter_counts(c);
  for (int64_t i = 0; i < c.attention_layers(); ++i)
    if (ckpt.has("model.layers." + std::to_string(i) + ".self_attn.kv_a_proj_with_mqa.weight")) ++r.layers_with_attention;

  const int64_t d_c = c.kv_lora_rank, d_r = c.qk_rope_head_dim;
  r.kv_bf16 = kv_bytes_per_token_layer(KvFormat::BF16, d_c, d_r);
  r.kv_fp8 = kv_bytes_per_token_layer(KvFormat::FP8, d_c, d_r);
  r.kv_fp4 = d_c % 32 == 0 ? kv_bytes_per_token_layer(KvFormat::FP4, d_c, d_r) : 0;
  r.kv_layers = c.num_hidden_layers;
  auto row = [&](const std::string& layout, int tp) {
    KvRow k;
    k.layout = layout;
    k.tp = tp;
    k.latent_width = d_c / tp;
    k.bf16 = kv_bytes_per_token_layer(KvFormat::BF16, k.latent_width, d_r) * r.kv_layers;
    k.fp8 = kv_bytes_per_token_layer(KvFormat::FP8, k.latent_width, d_r) * r.kv_layers;
    k.fp4 = k.latent_width % 32 == 0 ? kv_bytes_per_token_layer(KvFormat::FP4, k.latent_width, d_r) * r.kv_layers : 0;
    return k;
  };
  r.kv_per_device.push_back(row("MLA head-parallel", 1));
  for (int tp : {2, 4, 8})
    if (d_c % tp == 0) r.kv_per_device.push_back(row("TPLA tp=" + std::to_string(tp), tp));
  return r;
}

nlohmann::json inspect_to_json(const InspectReport& r) {
  const auto& c = r.config;
  nlohmann::json j;
  j["checkpoint"] = r.dir;
  j["family"] = r.family;
  j["model_type"] = c.model_type;
  j["dims"] = {{"hidden_size", c.hidden_size}, {"num_heads", c.num_heads},
               {"q_lora_rank", c.has_q_lora() ? nlohmann::json(c.q_lora_rank) : nlohmann::json(nullptr)},
               {"kv_lora_rank", c.kv_lora_rank}, {"qk_nope_head_dim", c.qk_nope_head_dim},
               {"qk_rope_head_dim", c.qk_rope_head_dim}, {"v_head_dim", c.v_head_dim},
               {"num_hidden_layers", c.num_hidden_layers}, {"num_nextn_predict_layers", c.num_nextn_predict_layers},
               {"first_k_dense_replace", c.first_k_dense_replace}, {"n_routed_experts", c.n_routed_experts},
               {"vocab_size", c.vocab_size}};
  j["rope"] = {{"theta", c.rope_theta}, {"interleave", c.rope_interleave}, {"yarn_factor", c.yarn ? c.yarn->factor : 1.0},
               {"softmax_scale", c.softmax_scale()}};
  j["files"] = r.files;
  j["file_bytes"] = r.file_bytes;
  j["tensors"] = r.tensors;
  for (const auto& [name, d] : r.dtypes) j["dtypes"][name] = {{"tensors", d.tensors}, {"bytes", d.bytes}};
  j["params"] = r.params;
  j["params"]["total"] = r.total_params;
  j["config_params"] = r.config_params;
  j["scale_elements"] = r.scale_elements;
  j["fp8_block_quantised_weights"] = r.fp8_weights;
  j["layers_with_attention"] = r.layers_with_attention;
  j["kv_bytes_per_token_per_layer"] = {{"bf16", r.kv_bf16}, {"fp8", r.kv_fp8}, {"fp4", r.kv_fp4}};
  j["kv_layers"] = r.kv_layers;
  for (const auto& k : r.kv_per_device)
    j["kv_bytes_per_token_per_device"].push_back(
        {{"layout", k.layout}, {"tp", k.tp}, {"latent_width", k.latent_width}, {"bf16", k.bf16}, {"fp8", k.fp8}, {"fp4", k.fp4}});
  if (!r.kv_cache_recorded.is_null()) j["kv_cache_recorded"] = r.kv_cache_recorded;
  return j;
}

namespace {
std::string yarn_text(const model::MlaConfig& c) {
  if (!c.yarn) return "no";
  char buf[96];
  std::snprintf(buf, sizeof buf, "factor %g, mscale_all_dim %g", c.yarn->factor, c.yarn->mscale_all_dim);
  return buf;
}
}  // namespace

std::string inspect_to_table(const InspectReport& r) {
  const auto& c = r.config;
  std::ostringstream o;
  char buf[256];
  o << "checkpoint  " << r.dir << "\n";
  o << "family      " << r.family << "  (model_type " << c.model_type << ")\n";
  o << "files       " << r.files << " (" << r.file_bytes << " bytes), " << r.tensors << " tensors\n\n";
  o << "dimensions\n";
  std::snprintf(buf, sizeof buf, "  D=%lld  H=%lld  q_lora_rank=%s  d_c=%lld  d_n=%lld  d_r=%lld  d_v=%lld\n",
                (long long)c.hidden_size, (long long)c.num_heads,
                c.has_q_lora() ? std::to_string(c.q_lora_rank).c_str() : "null", (long long)c.kv_lora_rank,
                (long long)c.qk_nope_head_dim, (long long)c.qk_rope_head_dim, (long long)c.v_head_dim);
  o << buf;
  std::snprintf(buf, sizeof buf, "  layers=%lld (+%lld MTP, %lld with attention present)  first_k_dense=%lld  experts=%lld  vocab=%lld\n",
                (long long)c.num_hidden_layers, (long long)c.num_nextn_predict_layers, (long long)r.layers_with_attention,
                (long long)c.first_k_dense_replace, (long long)c.n_routed_experts, (long long)c.vocab_size);
  o << buf;
  std::snprintf(buf, sizeof buf, "  rope_theta=%g  yarn=%s  interleave=%s  softmax_scale=%.9g\n\n", c.rope_theta,
                yarn_text(c).c_str(), c.rope_interleave ? "yes" : "no",
                c.softmax_scale());
  o << buf;
  o << "dtypes\n";
  for (const auto& [name, d] : r.dtypes) {
    std::snprintf(buf, sizeof buf, "  %-8s %6lld tensors %16lld bytes\n", name.c_str(), (long long)d.tensors, (long long)d.bytes);
    o << buf;
  }
  o << "\nparameters         in the files   full model per config.json (no MTP)\n";
  for (const auto& [part, n] : r.params) {
    const auto it = r.config_params.find(part);
    std::snprintf(buf, sizeof buf, "  %-11s %16lld %16s\n", part.c_str(), (long long)n,
                  it == r.config_params.end() ? "-" : std::to_string(it->second).c_str());
    o << buf;
  }
  std::snprintf(buf, sizeof buf, "  %-11s %16lld %16lld\n  (block scales excluded: %lld entries for %lld FP8 weights)\n\n",
                "total", (long long)r.total_params, (long long)r.config_params.at("total"), (long long)r.scale_elements,
                (long long)r.fp8_weights);
  o << buf;
  std::snprintf(buf, sizeof buf, "KV cache bytes per token per layer (d_c=%lld, d_r=%lld)\n  BF16 %lld   FP8 %lld   FP4 %lld\n\n",
                (long long)c.kv_lora_rank, (long long)c.qk_rope_head_dim, (long long)r.kv_bf16, (long long)r.kv_fp8,
                (long long)r.kv_fp4);
  o << buf;
  std::snprintf(buf, sizeof buf, "KV cache bytes per token per device, all %lld layers\n", (long long)r.kv_layers);
  o << buf;
  std::snprintf(buf, sizeof buf, "  %-18s %7s %10s %10s %10s\n", "layout", "latent", "BF16", "FP8", "FP4");
  o << buf;
  bool fp4_na = false;
  for (const auto& k : r.kv_per_device) {
    // FP4 packs groups of 32 latent values with one scale byte: a narrower slice has no FP4 layout.
    const std::string fp4 = k.fp4 > 0 ? std::to_string(k.fp4) : "n/a";
    fp4_na = fp4_na || k.fp4 == 0;
    std::snprintf(buf, sizeof buf, "  %-18s %7lld %10lld %10lld %10s\n", k.layout.c_str(), (long long)k.latent_width,
                  (long long)k.bf16, (long long)k.fp8, fp4.c_str());
    o << buf;
  }
  if (fp4_na) o << "  (n/a: FP4 needs a latent slice that is a multiple of its 32-value scale group)\n";
  if (!r.kv_cache_recorded.is_null()) {
    const auto& k = r.kv_cache_recorded;
    std::snprintf(buf, sizeof buf, "\nKV cache format recorded by mla-convert: %s, latent width %lld, %lld bytes per token (all layers)\n",
                  k.value("format", std::string("?")).c_str(), (long long)k.value("latent_width", int64_t{0}),
                  (long long)k.value("bytes_per_token", int64_t{0}));
    o << buf;
    // The 4-bit formats (docs/formats/kv-fp4.md) record their layer bytes and the layers kept BF16.
    if (k.contains("bytes_per_token_per_layer") && k.contains("protected_layers")) {
      std::snprintf(buf, sizeof buf, "  %lld bytes per token per quantised layer; protected (BF16) layers: %s\n",
                    (long long)k.value("bytes_per_token_per_layer", int64_t{0}), k["protected_layers"].dump().c_str());
      o << buf;
    }
  }
  return o.str();
}

}  // namespace mla::io
