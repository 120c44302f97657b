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

// The HDF5 C library sizes some metadata buffers from the file and handles a failed malloc
// (an error, not a crash); ASan's default is to abort on an impossible allocation size instead.
// Let malloc fail as glibc's does, so only real faults stop the fuzzer.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:detect_leaks=0"; }

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
