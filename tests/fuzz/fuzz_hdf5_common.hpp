#pragma once
// Shared by the HDF5 fuzz targets: the HDF5 readers open files by path, so each input is
// written to one per-process scratch file (in /dev/shm when it exists: no disk I/O per run).
// The fixed model the seeds of tests/fuzz/make_seeds.py match: 2 layers, hidden 8, 2 heads,
// d_c 8, d_r 4, g 2, checkpoint fingerprint "fuzz".
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fuzz {

inline const std::filesystem::path& scratch_file() {
  static const std::filesystem::path p = [] {
    const std::filesystem::path dir = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    return dir / ("mla-fuzz-" + std::to_string(::getpid()) + ".h5");
  }();
  return p;
}

inline const std::filesystem::path& write_input(const uint8_t* data, size_t size) {
  const auto& p = scratch_file();
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();  // the harness itself failed, not the reader
  return p;
}

// Removes the scratch file when the fuzzer exits normally.
struct ScratchCleanup {
  ~ScratchCleanup() {
    std::error_code ec;
    std::filesystem::remove(scratch_file(), ec);
  }
};

}  // namespace fuzz
