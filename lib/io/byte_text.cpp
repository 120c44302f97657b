#include "io/byte_text.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.hpp"

namespace mla::io {

std::vector<std::vector<int32_t>> byte_windows(std::span<const uint8_t> bytes, int64_t seq_len, int64_t max_windows) {
  if (seq_len < 2) throw InputError("sequence length " + std::to_string(seq_len) + " is too short (need >= 2)");
  int64_t n = static_cast<int64_t>(bytes.size()) / seq_len;
  if (max_windows > 0) n = std::min(n, max_windows);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (int64_t w = 0; w < n; ++w) {
    out[static_cast<size_t>(w)].assign(bytes.begin() + w * seq_len, bytes.begin() + (w + 1) * seq_len);
  }
  return out;
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open");
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.empty()) throw InputError(path.string() + ": file is empty");
  return data;
}

}  // namespace mla::io
