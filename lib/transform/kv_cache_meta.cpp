#include "transform/kv_cache_meta.hpp"

#include "core/error.hpp"
#include "io/inspect.hpp"
#include "quant/fp8_cache_format.hpp"

namespace mla::transform {

const std::vector<std::string>& kv_cache_format_names() {
  static const std::vector<std::string> n = {"bf16", "fp8"};
  return n;
}

nlohmann::json kv_cache_section(const std::string& format, int64_t latent_width, int64_t d_r, int64_t num_layers) {
  if (format == "bf16") {
    const int64_t b = io::kv_bytes_per_token_layer(io::KvFormat::BF16, latent_width, d_r);
    return {{"format", "bf16"},
            {"latent_width", latent_width},
            {"qk_rope_head_dim", d_r},
            {"bytes_per_token_per_layer", b},
            {"bytes_per_token", b * num_layers}};
  }
  if (format == "fp8") {
    quant::validate_fp8_layout(quant::Fp8CacheLayout{64, static_cast<int>(latent_width), static_cast<int>(d_r)});
    const int64_t b = io::kv_bytes_per_token_layer(io::KvFormat::FP8, latent_width, d_r);
    return {{"format", "fp8_e4m3_rope_aware_per_token"},
            {"spec", "docs/formats/kv-fp8.md"},
            {"latent_dtype", "float8_e4m3fn"},
            {"latent_width", latent_width},
            {"scale", {{"granularity", "per_token"}, {"dtype", "float32"}, {"rule", "max(amax(latent), 1e-12) / 448"}}},
            {"rope", {{"dtype", "bfloat16"}, {"qk_rope_head_dim", d_r}, {"divided_by_scale", true}}},
            {"query", {{"granularity", "per_token_per_head"}, {"rule", "same as the cache"}}},
            {"page_sizes", {64, 128}},
            {"page_layout", "[latent P*d_c][rope P*2*d_r][scales P*4], 128-byte column blocks, pre-swizzled"},
            {"protected_layers", nlohmann::json::array()},
            {"bytes_per_token_per_layer", b},
            {"bytes_per_token", b * num_layers}};
  }
  throw InputError("--kv-cache: unknown format '" + format + "' (one of: bf16, fp8)");
}

nlohmann::json hf_quant_config(const std::string& format, const std::string& version) {
  if (format == "bf16") return nullptr;
  if (format != "fp8") throw InputError("--kv-cache: unknown format '" + format + "' (one of: bf16, fp8)");
  // ModelOpt writes {"producer": {...}, "quantization": {"quant_algo": ..., "kv_cache_quant_algo": "FP8"}}; the
  // weights stay unquantised here (quant_algo null). The per-token scales are computed at append time (none are
  // stored in the checkpoint); config.json's kv_cache section has the details.
  return {{"producer", {{"name", "mla-convert"}, {"version", version}}},
          {"quantization",
           {{"quant_algo", nullptr},
            {"kv_cache_quant_algo", "FP8"},
            {"kv_cache_scheme", "mla_fp8_e4m3_rope_aware_per_token"}}}};
}

}  // namespace mla::transform
