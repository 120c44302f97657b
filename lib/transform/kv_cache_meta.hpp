#pragma once
// The KV-cache format a converted checkpoint is meant to be served with (mla-convert --kv-cache):
// the `kv_cache` section of each rank's config.json and the rank's hf_quant_config.json in
// ModelOpt's convention (`quantization.kv_cache_quant_algo`), so serving stacks can read it.
// The format itself: docs/formats/kv-fp8.md (fp8), docs/formats/kv-fp4.md (fp4, codebook), SPEC
// section 4 (bf16).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mla::transform {

struct Kv4Params;

// Formats mla-convert records: "bf16" (the default: nothing extra is written), "fp8", "fp4" and
// "codebook" (the 4-bit ones carry per-layer parameters: kv4_cache_section).
const std::vector<std::string>& kv_cache_format_names();

// The config.json `kv_cache` section of a rank whose latent slice is latent_width wide.
// Throws InputError for an unknown format or a width the format cannot store.
nlohmann::json kv_cache_section(const std::string& format, int64_t latent_width, int64_t qk_rope_head_dim,
                                int64_t num_layers);

// The kv_cache section of a 4-bit format: layout facts as kv_cache_section, plus the per-layer
// parameters (c or the RMS-unit table, protected layers: transform/kv4_params.hpp) and the
// rotation folded into the weights (`rotation`, as the converter describes it).
nlohmann::json kv4_cache_section(const Kv4Params& p, int64_t latent_width, int64_t qk_rope_head_dim, int64_t num_layers,
                                 const nlohmann::json& rotation);

// hf_quant_config.json for the format (ModelOpt's layout: producer + quantization), or null for bf16.
nlohmann::json hf_quant_config(const std::string& format, const std::string& version);

}  // namespace mla::transform
