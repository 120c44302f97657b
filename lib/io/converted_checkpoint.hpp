#pragma once
// Reading mla-convert's output (docs/formats/converted.md): OUT/rank-RR-of-TT/ is one Hugging
// Face checkpoint per rank (config.json with a `tpla` section, safetensors), beside OUT/manifest.json.
// The converter (transform/convert.cpp) writes it; verify-decode and the tests read it here, so
// reading a converted checkpoint never calls into the converter.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "model/attention_reference.hpp"
#include "model/config.hpp"

namespace mla::io {

// "rank-01-of-04": the directory of rank `rank` of `tp` inside a converted output.
std::string rank_dir_name(int rank, int tp);

// One rank's converted attention, read back: the rank's own MlaConfig (num_heads = H/(tp/g),
// kv_lora_rank = d_c/g), its float64 weights of `layer`, and the `tpla` section of its config.json.
struct RankAttention {
  model::MlaConfig config;
  model::AttentionWeights weights;
  nlohmann::json tpla;
};
// InputError when the directory is not an mla-convert rank (no `tpla` section) or a tensor is
// missing or mis-shaped (naming the directory and the tensor).
RankAttention load_rank_attention(const std::filesystem::path& rank_dir, int64_t layer);

// Checks `converted`/manifest.json: every listed output file's SHA-256, and that `original` has
// the checkpoint fingerprint the conversion recorded. InputError when the manifest is missing
// or malformed; VerificationError naming the file when a hash or the fingerprint differs.
void check_manifest(const std::filesystem::path& converted, const std::filesystem::path& original);

}  // namespace mla::io
