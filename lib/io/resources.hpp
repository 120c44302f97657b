#pragma once
// Disk space and memory, checked before long work and named in errors: a 700 GB conversion
// should fail in its first second, not at 95%, and an allocation failure should say what was
// being done and what the limits are (not just "std::bad_alloc").
#include <cstdint>
#include <filesystem>
#include <string>

namespace mla::io {

// Free bytes for an unprivileged writer on the filesystem holding `path` (statvfs f_bavail).
uint64_t free_bytes(const std::filesystem::path& path);

// Throws mla::Error naming `what`, the bytes needed and the bytes free when the filesystem of
// `path` has less than `need` bytes free (`need` plus 1% for headers and metadata).
void require_free_space(const std::filesystem::path& path, uint64_t need, const std::string& what);

// "out of memory while <what> (...needs about N...; address-space limit (ulimit -v) L, ...)":
// the message for a std::bad_alloc caught around `what` (need_bytes 0: unknown, not stated).
std::string out_of_memory_message(const std::string& what, uint64_t need_bytes);

// Bytes as "1.23 GiB" / "4.56 MiB" / "789 bytes".
std::string human_bytes(uint64_t b);

}  // namespace mla::io
