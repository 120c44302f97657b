#pragma once
// Text as byte-level tokens (token = byte value), the tokenisation of the shipped tiny models:
// what mla-forward captures and scores, and what verify-decode's --perplexity scores.
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace mla::io {

// Reads a whole file as bytes (InputError naming the file when unreadable or empty).
std::vector<uint8_t> read_bytes(const std::filesystem::path& path);

// Splits `bytes` into non-overlapping windows of `seq_len` tokens from the start, at most
// `max_windows` (0: all whole windows). InputError when seq_len < 2.
std::vector<std::vector<int32_t>> byte_windows(std::span<const uint8_t> bytes, int64_t seq_len,
                                               int64_t max_windows);

}  // namespace mla::io
