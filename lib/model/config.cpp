#include "model/config.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "core/error.hpp"

// Leniency follows what transformers' DeepseekV2/V3 classes read (transformers 5.x): a key
// they accept is accepted here, with a warning where the value is unusual or not used by MLA;
// a missing key of a deepseek_v2/deepseek_v3 config takes the class default, loudly (the
// checkpoint's tensor shapes are checked against the result, so a wrong default cannot pass
// silently). Refused: only what changes the computation and the reference cannot follow.
namespace mla::model {
namespace {

// transformers' class defaults (configuration_deepseek_v2.py / configuration_deepseek_v3.py).
// Only keys whose absence the class fills; other model types get no defaults.
std::optional<nlohmann::json> class_default(const std::string& model_type, const std::string& key) {
  static const nlohmann::json v2 = {
      {"vocab_size", 102400}, {"hidden_size", 4096}, {"intermediate_size", 11008},
      {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"kv_lora_rank", 512},
      {"q_lora_rank", 1536}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
      {"v_head_dim", 128}, {"n_routed_experts", 64}, {"n_shared_experts", 2},
      {"moe_intermediate_size", 1407}, {"first_k_dense_replace", 0}};
  static const nlohmann::json v3 = {
      {"vocab_size", 129280}, {"hidden_size", 7168}, {"intermediate_size", 18432},
      {"num_hidden_layers", 61}, {"num_attention_heads", 128}, {"kv_lora_rank", 512},
      {"q_lora_rank", 1536}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
      {"v_head_dim", 128}, {"n_routed_experts", 256}, {"n_shared_experts", 1},
      {"moe_intermediate_size", 2048}, {"first_k_dense_replace", 3}};
  const nlohmann::json* table = model_type == "deepseek_v2" ? &v2 : model_type == "deepseek_v3" ? &v3 : nullptr;
  if (!table) return std::nullopt;
  auto it = table->find(key);
  if (it == table->end()) return std::nullopt;
  return *it;
}

// const operator[] on a missing key is undefined in nlohmann::json: look up safely.
nlohmann::json value_or_null(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nlohmann::json() : *it;
}

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, std::string source, std::vector<std::string>* warnings = nullptr,
               std::string model_type = {})
      : j_(j), source_(std::move(source)), warnings_(warnings), model_type_(std::move(model_type)) {}

  void warn(const std::string& key, const std::string& what) const {
    if (warnings_) warnings_->push_back(source_ + ": key '" + key + "' " + what);
  }
  // The class default of a missing key (deepseek_v2 / deepseek_v3 only), with a warning.
  std::optional<nlohmann::json> default_for(const std::string& key) const {
    auto d = class_default(model_type_, key);
    if (d) warn(key, "is missing: using transformers' " + model_type_ + " default " + d->dump());
    return d;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(source_ + ": key '" + key + "' " + what);
  }
  [[noreturn]] void bad_value(const std::string& key, const nlohmann::json& v,
                              const std::string& why) const {
    fail(key, "has bad value " + v.dump() + ": " + why);
  }

  const nlohmann::json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

  int64_t int_value(const std::string& key, const nlohmann::json& v) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    // Some exporters write 512.0; accept integral floats, nothing else.
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    bad_value(key, v, "expected an integer");
  }
  double float_value(const std::string& key, const nlohmann::json& v) const {
    if (v.is_number()) return v.get<double>();
    bad_value(key, v, "expected a number");
  }

  int64_t required_int(const std::string& key, int64_t min_value) const {
    const auto* v = find(key);
    std::optional<nlohmann::json> fallback;
    if (!v || v->is_null()) {
      fallback = default_for(key);
      if (!fallback) fail(key, "is missing (required for model_type '" + model_type_ + "')");
      v = &*fallback;
    }
    const int64_t x = int_value(key, *v);
    if (x < min_value) bad_value(key, *v, "must be >= " + std::to_string(min_value));
    return x;
  }
  int64_t optional_int(const std::string& key, int64_t fallback, int64_t min_value) const {
    const auto* v = find(key);
    if (!v || v->is_null()) return fallback;
    const int64_t x = int_value(key, *v);
    if (x < min_value) bad_value(key, *v, "must be >= " + std::to_string(min_value));
    return x;
  }
  double optional_positive(const std::string& key, double fallback) const {
    const auto* v = find(key);
    if (!v || v->is_null()) return fallback;
    const double x = float_value(key, *v);
    if (!(x > 0.0) || !std::isfinite(x)) bad_value(key, *v, "must be a finite number > 0");
    return x;
  }

  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& j_;
  std::string source_;
  std::vector<std::string>* warnings_;
  std::string model_type_;
};

// Parses a YaRN parameter object (`rope_scaling` or `rope_parameters`); `where` is the key
// path used in messages. Defaults are transformers' (_compute_yarn_parameters).
YarnScaling parse_yarn(const nlohmann::json& obj, const std::string& where, const std::string& source,
                       int64_t max_position_embeddings, std::vector<std::string>* warnings) {
  ConfigReader r(obj, source, warnings);
  auto key = [&](const char* k) { return where + "." + k; };
  YarnScaling y;
  auto number = [&](const char* k, double fallback, bool required, bool positive) {
    auto it = obj.find(k);
    if (it == obj.end() || it->is_null()) {
      if (required) r.fail(key(k), "is missing (required for YaRN)");
      return fallback;
    }
    if (!it->is_number()) r.bad_value(key(k), *it, "expected a number");
    const double x = it->get<double>();
    if (!std::isfinite(x) || (positive && !(x > 0.0)) || (!positive && x < 0.0))
      r.bad_value(key(k), *it, positive ? "must be a finite number > 0" : "must be finite and >= 0");
    return x;
  };
  y.factor = number("factor", 1.0, true, true);
  y.mscale = number("mscale", 1.0, false, false);
  y.mscale_all_dim = number("mscale_all_dim", 0.0, false, false);
  // transformers: `beta_fast or 32`, `beta_slow or 1`: 0 means the default.
  y.beta_fast = number("beta_fast", 32.0, false, false);
  y.beta_slow = number("beta_slow", 1.0, false, false);
  if (y.beta_fast == 0.0) y.beta_fast = 32.0;
  if (y.beta_slow == 0.0) y.beta_slow = 1.0;
  // Keys that change the rotation or the attention scale in ways the reference does not
  // implement: computing without them would silently differ from transformers.
  if (auto it = obj.find("truncate"); it != obj.end() && !it->is_null() && *it != nlohmann::json(true))
    r.bad_value(key("truncate"), *it, "only the default (true: floor/ceil of the YaRN correction range) is implemented");
  if (auto it = obj.find("attention_factor"); it != obj.end() && !it->is_null())
    r.bad_value(key("attention_factor"), *it,
                "an explicit YaRN attention factor is not implemented (the factor comes from mscale / mscale_all_dim)");
  // An integer: read by the reader's integer rule (integral floats accepted, in range), not as a
  // number cast afterwards (fuzz_config_json's 1.67e95 made that cast undefined).
  y.original_max_position_embeddings = max_position_embeddings > 0 ? max_position_embeddings : 4096;
  if (auto it = obj.find("original_max_position_embeddings"); it != obj.end() && !it->is_null()) {
    y.original_max_position_embeddings = r.int_value(key("original_max_position_embeddings"), *it);
    if (y.original_max_position_embeddings <= 0)
      r.bad_value(key("original_max_position_embeddings"), *it, "must be a finite number > 0");
  }
  // transformers only warns about this (the ramp runs the other way); so do we.
  if (y.beta_slow > y.beta_fast)
    r.warn(key("beta_slow"), std::string("(").append(std::to_string(y.beta_slow)).append(") exceeds beta_fast (")
                                 .append(std::to_string(y.beta_fast)).append("): unusual, computed as transformers does"));
  return y;
}

// rope type: "yarn" -> YaRN; "default"/absent -> plain RoPE; anything else is refused,
// because the attention reference would silently compute the wrong rotation.
std::string rope_type_of(const nlohmann::json& obj, const std::string& where, const ConfigReader& r) {
  for (const char* k : {"rope_type", "type"}) {
    auto it = obj.find(k);
    if (it != obj.end() && !it->is_null()) {
      if (!it->is_string()) r.bad_value(where + "." + k, *it, "expected a string");
      return it->get<std::string>();
    }
  }
  return "default";
}

}  // namespace

double MlaConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_nope_head_dim + qk_rope_head_dim));
  // DeepSeek's yarn_get_mscale: 1 when factor <= 1.
  if (yarn && yarn->mscale_all_dim != 0.0 && yarn->factor > 1.0) {
    const double m = 0.1 * yarn->mscale_all_dim * std::log(yarn->factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

MlaConfig parse_mla_config(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw InputError(source + ": expected a JSON object, got " + std::string(j.type_name()));
  MlaConfig c;
  if (auto mt = j.find("model_type"); mt != j.end()) {
    if (!mt->is_string()) ConfigReader(j, source).bad_value("model_type", *mt, "expected a string");
    c.model_type = mt->get<std::string>();
  } else {
    ConfigReader(j, source).fail("model_type", "is missing (required)");
  }
  ConfigReader r(j, source, &c.warnings, c.model_type);

  c.hidden_size = r.required_int("hidden_size", 1);
  c.num_heads = r.required_int("num_attention_heads", 1);
  // q_lora_rank must be present: null selects the V2 q_proj path, a number the LoRA path.
  if (const auto* q = r.find("q_lora_rank")) {
    c.q_lora_rank = q->is_null() ? 0 : r.int_value("q_lora_rank", *q);
    if (c.q_lora_rank < 0) r.bad_value("q_lora_rank", *q, "must be null or > 0");
  } else if (const auto d = r.default_for("q_lora_rank")) {
    c.q_lora_rank = d->get<int64_t>();
  } else {
    r.fail("q_lora_rank", "is missing (required; null for DeepSeek-V2 style q_proj)");
  }
  c.kv_lora_rank = r.required_int("kv_lora_rank", 1);
  c.qk_nope_head_dim = r.required_int("qk_nope_head_dim", 1);
  c.qk_rope_head_dim = r.required_int("qk_rope_head_dim", 2);
  if (c.qk_rope_head_dim % 2 != 0)
    r.bad_value("qk_rope_head_dim", value_or_null(j, "qk_rope_head_dim"), "must be even (RoPE rotates pairs)");
  c.v_head_dim = r.required_int("v_head_dim", 1);
  c.num_hidden_layers = r.required_int("num_hidden_layers", 1);
  c.vocab_size = r.required_int("vocab_size", 1);
  c.intermediate_size = r.required_int("intermediate_size", 1);

  // MoE: absent n_routed_experts is the class default for deepseek_v2/v3 (as transformers
  // builds it), else a dense model (every layer uses the dense MLP).
  auto moe_int = [&](const char* k, int64_t min_value) {
    const auto* v = r.find(k);
    if (v && !v->is_null()) return r.optional_int(k, 0, min_value);
    const auto d = r.default_for(k);
    return d ? d->get<int64_t>() : int64_t{0};
  };
  c.n_routed_experts = moe_int("n_routed_experts", 0);
  c.n_shared_experts = moe_int("n_shared_experts", 0);
  c.moe_intermediate_size = c.n_routed_experts > 0 ? r.required_int("moe_intermediate_size", 1)
                                                   : r.optional_int("moe_intermediate_size", 0, 0);
  c.first_k_dense_replace = moe_int("first_k_dense_replace", 0);
  // transformers builds layer i as MoE when i >= first_k_dense_replace: beyond the layer
  // count every layer is dense, a well-defined model.
  if (c.first_k_dense_replace > c.num_hidden_layers)
    r.warn("first_k_dense_replace", std::string("(").append(std::to_string(c.first_k_dense_replace))
                                        .append(") exceeds num_hidden_layers (").append(std::to_string(c.num_hidden_layers))
                                        .append("): every layer is dense"));
  c.num_nextn_predict_layers = r.optional_int("num_nextn_predict_layers", 0, 0);
  // transformers: DeepseekV2Config 2048, DeepseekV3Config 4096.
  c.max_position_embeddings = r.optional_int("max_position_embeddings", c.model_type == "deepseek_v2" ? 2048 : 4096, 1);
  c.rms_norm_eps = r.optional_positive("rms_norm_eps", 1e-6);

  if (const auto* ri = r.find("rope_interleave"); ri && !ri->is_null()) {
    if (!ri->is_boolean()) r.bad_value("rope_interleave", *ri, "expected true or false");
    // transformers' DeepseekV2 attention always rotates interleaved pairs (view_as_complex)
    // and never reads the key: follow the model, not the key.
    if (c.model_type == "deepseek_v2") {
      if (!ri->get<bool>())
        r.warn("rope_interleave", "is false, but DeepseekV2 attention always rotates interleaved pairs "
                                  "(transformers does not read this key): using interleaved RoPE");
    } else {
      c.rope_interleave = ri->get<bool>();
    }
  }

  if (const auto* nkv = r.find("num_key_value_heads"); nkv && !nkv->is_null()) {
    // MLA has no grouped K/V heads: every head reads the one latent. DeepSeek configs repeat
    // the head count here; DeepseekV3Config's class default is 128 whatever the head count.
    if (!nkv->is_number_integer() || nkv->get<int64_t>() != c.num_heads)
      r.warn("num_key_value_heads", std::string("= ").append(nkv->dump()).append(" differs from num_attention_heads (")
                                        .append(std::to_string(c.num_heads)).append("): not used by MLA attention, ignored"));
  }

  // Biases on q_a_proj / kv_a_proj_with_mqa / o_proj (transformers' attention_bias) change the
  // latent and the output; the reference, the reparameterisation and the kernels have none.
  if (const auto* ab = r.find("attention_bias"); ab && !ab->is_null()) {
    if (!ab->is_boolean()) r.bad_value("attention_bias", *ab, "expected true or false");
    if (ab->get<bool>())
      r.bad_value("attention_bias", *ab,
                  "attention biases (q_a_proj, kv_a_proj_with_mqa, o_proj) are not supported: the latent "
                  "rotation and the decode kernels assume bias-free projections");
  }

  // RoPE: top-level rope_theta + rope_scaling (published checkpoints) or transformers 5.x
  // rope_parameters. When both carry a fact they must agree.
  const bool has_top_theta = r.find("rope_theta") && !r.find("rope_theta")->is_null();
  c.rope_theta = r.optional_positive("rope_theta", 10000.0);
  std::optional<YarnScaling> top_yarn;
  if (const auto* rs = r.find("rope_scaling"); rs && !rs->is_null()) {
    if (!rs->is_object()) r.bad_value("rope_scaling", *rs, "expected an object or null");
    const std::string type = rope_type_of(*rs, "rope_scaling", r);
    if (type == "yarn") {
      top_yarn = parse_yarn(*rs, "rope_scaling", source, c.max_position_embeddings, &c.warnings);
    } else if (type != "default") {
      r.bad_value("rope_scaling.type", nlohmann::json(type), "only 'yarn' or 'default' RoPE is supported for MLA");
    }
  }
  c.yarn = top_yarn;
  if (const auto* rp = r.find("rope_parameters"); rp && !rp->is_null()) {
    if (!rp->is_object()) r.bad_value("rope_parameters", *rp, "expected an object");
    double theta = c.rope_theta;
    if (auto it = rp->find("rope_theta"); it != rp->end() && !it->is_null()) {
      if (!it->is_number() || !(it->get<double>() > 0.0))
        r.bad_value("rope_parameters.rope_theta", *it, "must be a number > 0");
      theta = it->get<double>();
      if (has_top_theta && theta != c.rope_theta)
        r.bad_value("rope_parameters.rope_theta", *it,
                    "disagrees with top-level rope_theta " + value_or_null(j, "rope_theta").dump());
    }
    c.rope_theta = theta;
    const std::string type = rope_type_of(*rp, "rope_parameters", r);
    if (type == "yarn") {
      const YarnScaling y = parse_yarn(*rp, "rope_parameters", source, c.max_position_embeddings, &c.warnings);
      if (top_yarn && (top_yarn->factor != y.factor || top_yarn->mscale_all_dim != y.mscale_all_dim ||
                       top_yarn->mscale != y.mscale))
        r.bad_value("rope_parameters.factor", value_or_null(*rp, "factor"), "disagrees with rope_scaling " + value_or_null(j, "rope_scaling").dump());
      c.yarn = y;
    } else if (type != "default") {
      r.bad_value("rope_parameters.rope_type", nlohmann::json(type), "only 'yarn' or 'default' RoPE is supported for MLA");
    } else if (top_yarn) {
      r.bad_value("rope_parameters.rope_type", nlohmann::json(type), "disagrees with rope_scaling of type yarn");
    }
  }
  return c;
}

MlaConfig load_mla_config(const std::filesystem::path& config_json) {
  std::ifstream in(config_json, std::ios::binary);
  if (!in) throw InputError(config_json.string() + ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(config_json.string() + ": not valid JSON: " + e.what());
  }
  MlaConfig c = parse_mla_config(j, config_json.string());
  log_config_warnings(c);
  return c;
}

void log_config_warnings(const MlaConfig& c) {
  for (const auto& w : c.warnings) spdlog::warn("{}", w);
}

}  // namespace mla::model
