// libFuzzer target: model.safetensors.index.json text -> JSON -> parse_weight_map. Any
// outcome other than a map or an InputError is a bug; so is an accepted shard name that
// could escape the checkpoint directory.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"
#include "io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    const auto map = mla::io::parse_weight_map(j, "fuzz/model.safetensors.index.json");
    if (map.empty()) std::abort();
    for (const auto& [tensor, file] : map)
      if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos) std::abort();
  } catch (const mla::InputError&) {
  }
  return 0;
}
