// libFuzzer target: config.json text -> JSON -> parse_mla_config. Any outcome other than an
// MlaConfig or an InputError (a crash, a sanitizer report, another exception type) is a bug;
// so is an accepted config whose dimensions a consumer could not use.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"
#include "model/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: load_mla_config reports it before parsing
  }
  try {
    const mla::model::MlaConfig c = mla::model::parse_mla_config(j, "fuzz/config.json");
    if (c.hidden_size < 1 || c.num_heads < 1 || c.kv_lora_rank < 1 || c.qk_nope_head_dim < 1 ||
        c.qk_rope_head_dim < 2 || c.qk_rope_head_dim % 2 != 0 || c.v_head_dim < 1 || c.num_hidden_layers < 1)
      std::abort();
    (void)c.softmax_scale();
  } catch (const mla::InputError&) {
    // expected for malformed input
  }
  return 0;
}
