#pragma once
// Synthetic Hugging Face MLA checkpoints: real tensor names and shapes, random but seeded
// weights. Used by tests, benchmarks and as the shipped default until trained tiny models
// exist. What is generated (docs/formats/checkpoint.md, "Synthetic checkpoints"):
//   model.embed_tokens.weight, model.norm.weight, lm_head.weight;
//   per layer: input/post_attention layernorms, every self_attn tensor (q_proj, or
//   q_a_proj + q_a_layernorm + q_b_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
//   o_proj); the dense MLP for layers < first_k_dense_replace; for MoE layers the router
//   (mlp.gate.weight, plus e_score_correction_bias for sigmoid routers), the shared experts
//   and the first `experts` routed experts (0 by default: large configs omit them).
//   MTP layers are not generated (the written config says num_nextn_predict_layers = 0).
// Values: linear weights ~ N(0, 1/fan_in) (Irwin-Hall approximation from 4 x 16 random bits),
// norms 1 + 0.2 N(0,1) clamped to >= 0.05, embeddings 0.02 N(0,1), router bias 0.01 N(0,1).
// Streams: xoshiro256** per 128-row strip, seeded from (seed, FNV-1a of the name, strip),
// so the bytes do not depend on the thread count. FP8: E4M3 with 128x128 block scales
// (quantize_fp8_block on each strip); BF16: float -> bf16 round to nearest even.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"

namespace mla::io {

enum class SyntheticFormat { BF16, FP8 };

struct SyntheticPreset {
  model::MlaConfig config;
  nlohmann::json extra;  // config.json keys outside MlaConfig (router settings, architectures)
};

// "deepseek-v2-lite", "deepseek-v3", "kimi-k2" (published shapes), "tiny-v3", "tiny-v2".
SyntheticPreset synthetic_preset(const std::string& name);
std::vector<std::string> synthetic_preset_names();

struct SyntheticOptions {
  SyntheticPreset model;                 // num_hidden_layers = layers generated
  SyntheticFormat format = SyntheticFormat::FP8;
  int64_t experts = 0;                   // routed experts per MoE layer; -1: all of them
  uint64_t seed = 0;
  uint64_t max_shard_bytes = 5ull << 30;
  int threads = 0;                       // 0: std::thread::hardware_concurrency()
  bool overwrite = false;
};

enum class SyntheticKind { Linear, Norm, Embedding, Bias };
struct SyntheticTensor {
  std::string name;
  Shape shape;
  SyntheticKind kind{};
  DType dtype{};     // BF16, F32 (bias) or F8_E4M3 (then a `<name>_scale_inv` F32 follows)
};

// Every tensor to generate (weights only; scales are implied by F8_E4M3), sorted by name.
std::vector<SyntheticTensor> plan_synthetic(const SyntheticOptions& opts);
// config.json contents: MlaConfig keys + preset extras (+ quantization_config for FP8).
nlohmann::json synthetic_config_json(const SyntheticOptions& opts);
// A config.json for any MlaConfig (the MlaConfig keys only, in the published spelling).
nlohmann::json mla_config_to_json(const model::MlaConfig& cfg);

struct SyntheticResult {
  ShardPlan shards;
  uint64_t file_bytes = 0;   // sum of file sizes written
  int64_t parameters = 0;    // elements of generated weights (scales excluded)
  double seconds = 0.0;
};
// Writes the checkpoint into `out` atomically (AtomicDirectory): nothing appears at `out`
// unless every file is complete.
SyntheticResult write_synthetic_checkpoint(const SyntheticOptions& opts, const std::filesystem::path& out);

// One generated tensor's bytes (and block scales for FP8), for tests and for writing.
struct GeneratedTensor {
  OwnedTensor weight;
  OwnedTensor scale_inv;  // empty name unless F8_E4M3
};
GeneratedTensor generate_synthetic_tensor(const SyntheticTensor& t, uint64_t seed, int threads);

}  // namespace mla::io
