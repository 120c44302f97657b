#pragma once
// A Hugging Face checkpoint directory: config.json, one `model.safetensors` or many shards
// with `model.safetensors.index.json`. Every lookup goes through weight_map; FP8 E4M3
// weights with `<name>_scale_inv` ([ceil(rows/128), ceil(cols/128)] float scales, possibly
// in another shard) are dequantised exactly (core/fp8_block.hpp).
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fp8_block.hpp"
#include "core/tensor.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"

namespace mla::io {

// The tensor -> shard file map of a model.safetensors.index.json (its `weight_map`), checked:
// an object of non-empty plain file names (no '/', '.', '..'). `source` names the file in errors.
std::map<std::string, std::string> parse_weight_map(const nlohmann::json& index, const std::string& source);

class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  const std::filesystem::path& dir() const;
  const nlohmann::json& config_json() const;
  const model::MlaConfig& config() const;
  std::vector<std::string> tensor_names() const;        // sorted
  bool has(const std::string& name) const;
  std::filesystem::path file_of(const std::string& name) const;
  std::vector<std::filesystem::path> files() const;     // every shard, sorted
  TensorView raw(const std::string& name) const;        // zero-copy, throws if missing
  // float64 values of a weight; FP8 with a `_scale_inv` partner is dequantised.
  std::vector<double> load_f64(const std::string& name, Shape* shape = nullptr) const;
  MatrixR load_matrix(const std::string& name) const;   // 2-D weights (1-D: a row vector)

 private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla::io
