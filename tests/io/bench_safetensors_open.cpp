// Benchmark (a program that prints figures, not a test): time to open and validate one
// safetensors file of DeepSeek-V3-like shape. The file is sparse (header written, data
// sized with ftruncate), so a multi-GB shard costs no disk and the figure is the reader's
// own cost: open + mmap + header parse + validation.
//   bench_safetensors_open [n_tensors=1000] [repeats=20] [dir=/tmp]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "io/safetensors.hpp"

using namespace mla;
using namespace mla::io;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::stoi(argv[1]) : 1000;
  const int repeats = argc > 2 ? std::stoi(argv[2]) : 20;
  const std::string dir = argc > 3 ? argv[3] : "/tmp";
  // FP8 weights with their F32 128x128 block scales, named like DeepSeek-V3's.
  std::vector<TensorSpec> specs;
  for (int i = 0; specs.size() < static_cast<size_t>(n); ++i) {
    const std::string base = "model.layers." + std::to_string(i / 8) + ".self_attn.w" + std::to_string(i % 8);
    specs.push_back({base + ".weight", DType::F8_E4M3, {576, 7168}});
    specs.push_back({base + ".weight_scale_inv", DType::F32, {5, 56}});
  }
  const FileLayout layout = plan_file(specs, {{"format", "pt"}});
  const std::string path = dir + "/bench_safetensors_open." + std::to_string(::getpid()) + ".safetensors";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return std::perror(path.c_str()), 1;
  uint64_t hn = layout.header_json.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(hn >> (8 * i));
  bool ok = ::write(fd, prefix, 8) == 8 &&
            ::write(fd, layout.header_json.data(), hn) == static_cast<ssize_t>(hn) &&
            ::ftruncate(fd, static_cast<off_t>(layout.file_size())) == 0;
  ::close(fd);
  if (!ok) return std::perror(path.c_str()), ::unlink(path.c_str()), 1;

  double best = 1e9, total = 0;
  size_t tensors = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto f = SafetensorsFile::open(path);
    tensors = f.header().tensors.size();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ms);
    total += ms;
  }
  ::unlink(path.c_str());
  std::printf("tensors %zu  header %.1f KiB  file %.2f GiB (sparse)  open+validate: best %.2f ms, mean %.2f ms "
              "over %d runs  (%.2f us/tensor)\n",
              tensors, hn / 1024.0, layout.file_size() / 1073741824.0, best, total / repeats, repeats,
              1000.0 * best / static_cast<double>(tensors));
  return 0;
}
