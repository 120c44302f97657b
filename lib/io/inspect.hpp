#pragma once
// What mla-inspect reports about a checkpoint: family, MLA dimensions, dtypes, parameter
// counts by part, and KV cache sizes (SPEC section 4) for head-parallel MLA vs TPLA.
//
// KV bytes per token per layer at latent width w (d_c, or d_c/tp for a TPLA rank) and d_r:
//   BF16: (w + d_r) * 2                      (1152 at d_c=512, d_r=64)
//   FP8 : w + 4 + 2*d_r  (E4M3 latent, fp32 per-token scale, BF16 RoPE part)   (644)
//   FP4 : w/2 + w/32 + 2*d_r (E2M1 codes, one UE8M0 byte per 32, BF16 RoPE)   (400)
// Head-parallel MLA replicates the whole latent on every device; a TPLA rank holds w = d_c/tp
// plus the replicated RoPE part (and, for FP8, its own per-token scale of its slice).
// "All layers" means the num_hidden_layers decoder layers (MTP layers excluded).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"

namespace mla::io {

enum class KvFormat { BF16, FP8, FP4 };
// Throws InputError when the width does not fit the format (FP4: multiple of 32).
int64_t kv_bytes_per_token_layer(KvFormat format, int64_t latent_width, int64_t rope_dim);

struct KvRow {
  std::string layout;      // "MLA head-parallel" or "TPLA tp=N"
  int tp = 1;
  int64_t latent_width = 0;
  int64_t bf16 = 0, fp8 = 0, fp4 = 0;  // per device, per token, all layers
};

struct DtypeStats {
  int64_t tensors = 0;
  int64_t bytes = 0;
};

struct InspectReport {
  std::string dir;
  std::string family;
  model::MlaConfig config;
  int64_t files = 0;
  int64_t file_bytes = 0;
  int64_t tensors = 0;
  std::map<std::string, DtypeStats> dtypes;   // dtype name -> stats
  std::map<std::string, int64_t> params;      // part -> elements (scales excluded)
  int64_t total_params = 0;
  std::map<std::string, int64_t> config_params;  // config_parameter_counts (+ "total")
  int64_t scale_elements = 0;                 // *_scale_inv entries
  int64_t fp8_weights = 0;                    // F8_E4M3 tensors (each has block scales)
  int64_t layers_with_attention = 0;          // layers whose kv_a_proj_with_mqa is present
  int64_t kv_bf16 = 0, kv_fp8 = 0, kv_fp4 = 0;  // per token per layer
  int64_t kv_layers = 0;
  std::vector<KvRow> kv_per_device;           // head-parallel, then TPLA tp = 2, 4, 8
  // config.json's kv_cache section (mla-convert --kv-cache, transform/kv_cache_meta.hpp), null when absent.
  nlohmann::json kv_cache_recorded;
};

// Parameters the config implies for the full model (decoder layers; MTP layers and router
// biases excluded), by the same parts as tensor_part(): what a complete checkpoint holds.
std::map<std::string, int64_t> config_parameter_counts(const model::MlaConfig& cfg);

// Part of a tensor name: "attention", "mlp_dense", "moe", "embeddings", "norms", "scales", "other".
std::string tensor_part(const std::string& name);
std::string family_name(const model::MlaConfig& cfg);

InspectReport inspect_checkpoint(const Checkpoint& ckpt);
nlohmann::json inspect_to_json(const InspectReport& r);
std::string inspect_to_table(const InspectReport& r);

}  // namespace mla::io
