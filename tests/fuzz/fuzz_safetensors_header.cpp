// libFuzzer target: parse_and_validate over arbitrary bytes. Any outcome other than a
// Header or a SafetensorsError (a crash, a sanitizer report, another exception type, a
// validated header that contradicts the buffer) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const mla::io::Header h = mla::io::parse_and_validate(bytes, "fuzz");
    // Invariants a consumer relies on: every tensor's bytes lie inside the buffer.
    const uint64_t data_size = size - 8 - h.header_size;
    if (h.data_size != data_size) std::abort();
    for (const auto& t : h.tensors)
      if (t.begin > t.end || t.end > data_size) std::abort();
  } catch (const mla::io::SafetensorsError&) {
    // expected for malformed input
  }
  return 0;
}
