// Helper for the Python interop test (interop.py):
//   st_interop write <file>   writes one tensor of every dtype with a known byte pattern
//   st_interop dump <file>    reads a file with our reader and prints it as JSON
//                             {"metadata": {..}, "tensors": {name: {dtype, shape, hex}}}
// Exit 1 (message on stderr) when our reader rejects the file.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"

using namespace mla;

namespace {

const DType kAll[] = {DType::BOOL, DType::U8, DType::I8, DType::U16, DType::I16, DType::U32,
                      DType::I32, DType::U64, DType::I64, DType::F8_E4M3, DType::F8_E5M2,
                      DType::F8_E8M0, DType::F4, DType::F16, DType::BF16, DType::F32, DType::F64};

// Must match expected_bytes() in interop.py.
std::vector<std::byte> pattern(DType d, size_t n, int k) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i)
    b[i] = static_cast<std::byte>(d == DType::BOOL ? (i + k) % 2 : (i * 37 + k * 11 + 5) & 0xFF);
  return b;
}

int write(const std::string& path) {
  std::vector<OwnedTensor> ts;
  int k = 0;
  for (DType d : kAll) {
    OwnedTensor t{"t_" + std::string(dtype_name(d)), d, {3, 4}, {}};
    t.bytes = pattern(d, io::TensorSpec{t.name, d, t.shape}.nbytes(), k++);
    ts.push_back(std::move(t));
  }
  io::write_safetensors(path, ts, {{"producer", "st_interop"}, {"note", "caf\xc3\xa9"}});
  return 0;
}

int dump(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  nlohmann::json out = {{"metadata", f.header().metadata}, {"tensors", nlohmann::json::object()}};
  for (const auto& t : f.header().tensors) {
    std::string hex;
    char buf[3];
    for (std::byte b : f.view(t.name).bytes) {
      std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(b));
      hex += buf;
    }
    out["tensors"][t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"hex", hex}};
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: st_interop write|dump <file>\n";
    return 2;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "write") return write(argv[2]);
    if (cmd == "dump") return dump(argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "st_interop: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "st_interop: unknown command " << cmd << "\n";
  return 2;
}
