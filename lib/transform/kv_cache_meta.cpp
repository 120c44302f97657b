#include "transform/kv_cache_meta.hpp"

#include "core/error.hpp"
#include "io/inspect.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"
#include "quant/fp8_cache_format.hpp"
#include "transform/kv4_params.hpp"

namespace mla::transform {

const std::vector<std::string>& kv_cache_format_names() {
  static const std::vector<std::string> n = {"bf16", "fp8", "fp4", "codebook"};
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
  if (is_kv4_format(format))
    throw InputError("--kv-cache " + format + ": the 4-bit formats are written with their parameters (kv4_cache_section)");
  throw InputError("--kv-cache: unknown format '" + format + "' (one of: bf16, fp8, fp4, codebook)");
}

nlohmann::json kv4_cache_section(const Kv4Params& p, int64_t latent_width, int64_t d_r, int64_t num_layers,
                                 const nlohmann::json& rotation) {
  const int w = static_cast<int>(latent_width), r = static_cast<int>(d_r);
  nlohmann::json s;
  int64_t b = 0;
  if (p.format == "fp4") {
    quant::validate_fp4_layout(quant::Fp4CacheLayout{64, w, r});
    b = static_cast<int64_t>(quant::Fp4CacheLayout{64, w, r}.bytes_per_token());
    s = {{"format", "fp4_e2m1_ue8m0_g32"},
         {"latent_dtype", "e2m1 (two codes a byte, low nibble = even index)"},
         {"scale", {{"granularity", "32 values"}, {"dtype", "ue8m0"}, {"rule", std::string(quant::fp4_rule_name(p.rule))},
                    {"formula", "E = round(log2(c * amax)), byte = E + 127 (round rule)"}}},
         {"dequantisation", "bf16(e2m1(code) * 2^(byte - 127))"},
         {"page_layout", "[codes P*d_c/2][scales P*d_c/32][rope P*2*d_r], 128-byte column blocks, pre-swizzled"}};
  } else {
    quant::validate_codebook_layout(quant::CodebookCacheLayout{64, w, r});
    b = static_cast<int64_t>(quant::CodebookCacheLayout{64, w, r}.bytes_per_token());
    s = {{"format", "codebook4_lloyd_max_per_token_rms"},
         {"latent_dtype", "4-bit index into the layer's 16 fp32 levels (low nibble = even index)"},
         {"scale", {{"granularity", "per_token"}, {"dtype", "float32"}, {"rule", "rms of the token's latent row"}}},
         {"dequantisation", "bf16(level[index] * scale)"},
         {"page_layout", "[codes P*d_c/2][scales P*4][rope P*2*d_r], 128-byte column blocks, pre-swizzled"}};
  }
  s["spec"] = "docs/formats/kv-fp4.md";
  s["latent_width"] = latent_width;
  s["rope"] = {{"dtype", "bfloat16"}, {"qk_rope_head_dim", d_r}, {"divided_by_scale", false}};
  s["query"] = {{"dtype", "bfloat16"}, {"rotated_at_run_time", false}};
  s["rotation"] = rotation;
  s["page_sizes"] = {64, 128};
  s["bytes_per_token_per_layer"] = b;
  const nlohmann::json params = kv4_params_json(p);
  s["layers"] = params["layers"];
  s["protected_layers"] = params["protected_layers"];
  s["calibration"] = {{"calib", p.calib}};
  if (p.format == "fp4") s["calibration"]["c_source"] = p.c_source;
  int64_t total = 0;
  for (int64_t i = 0; i < num_layers; ++i) {
    const bool prot = static_cast<size_t>(i) < p.layers.size() && p.layers[static_cast<size_t>(i)].protect_bf16;
    total += prot ? io::kv_bytes_per_token_layer(io::KvFormat::BF16, latent_width, d_r) : b;
  }
  s["bytes_per_token"] = total;  // protected layers counted at BF16
  return s;
}

nlohmann::json hf_quant_config(const std::string& format, const std::string& version) {
  if (format == "bf16") return nullptr;
  // fp4: the element format decodes exactly as OCP MXFP4 (E2M1, E8M0 scale per 32 values);
  // only our encoder's exponent rule (calibrated c) and the page layout differ, both in
  // config.json's kv_cache section. codebook: no ModelOpt algorithm exists; an unknown name makes
  // a ModelOpt reader refuse rather than misread the cache.
  if (format == "fp4" || format == "codebook")
    return {{"producer", {{"name", "mla-convert"}, {"version", version}}},
            {"quantization",
             {{"quant_algo", nullptr},
              {"kv_cache_quant_algo", format == "fp4" ? "MXFP4" : "MLA_CODEBOOK4"},
              {"kv_cache_scheme", format == "fp4" ? "mla_fp4_e2m1_ue8m0_g32_hadamard_folded"
                                                  : "mla_lloyd_max_codebook4_per_token_rms_hadamard_folded"}}}};
  if (format != "fp8") throw InputError("--kv-cache: unknown format '" + format + "' (one of: bf16, fp8, fp4, codebook)");
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
