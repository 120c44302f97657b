#include "io/checkpoint_scan.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.hpp"

namespace mla::io {
namespace {

// Index of the first non-finite element, or -1. Bit tests: no float conversion per element.
int64_t first_bad(const TensorView& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.bytes.data());
  const int64_t n = v.numel();
  switch (v.dtype) {
    case DType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7F) == 0x7F) return i;
      return -1;
    case DType::BF16:
    case DType::F16: {
      const uint16_t mask = v.dtype == DType::BF16 ? 0x7F80 : 0x7C00;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t u;
        std::memcpy(&u, p + 2 * i, 2);
        if ((u & mask) == mask) return i;
      }
      return -1;
    }
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, p + 4 * i, 4);
        if ((u & 0x7F800000u) == 0x7F800000u) return i;
      }
      return -1;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        uint64_t u;
        std::memcpy(&u, p + 8 * i, 8);
        if ((u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull) return i;
      }
      return -1;
    default: {
      // Integer / other formats have no invalid bit patterns here; still touch the bytes.
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < v.bytes.size(); i += 4096) sink = sink ^ p[i];
      return -1;
    }
  }
}

void check_tensor(const Checkpoint& ckpt, const std::string& name) {
  const TensorView v = ckpt.raw(name);
  const int64_t bad = first_bad(v);
  if (bad >= 0)
    throw InputError(ckpt.file_of(name).string() + ": tensor '" + name + "' element " + std::to_string(bad) +
                     " is not finite (" + std::to_string(v.at(static_cast<size_t>(bad))) + ")");
  if (name.ends_with("_scale_inv") && v.dtype == DType::F32) {
    for (int64_t i = 0; i < v.numel(); ++i) {
      const double s = v.at(static_cast<size_t>(i));
      if (!(s > 0.0))
        throw InputError(ckpt.file_of(name).string() + ": scale tensor '" + name + "' element " + std::to_string(i) +
                         " is " + std::to_string(s) + ", expected > 0");
    }
  }
}

}  // namespace

ScanReport scan_checkpoint(const Checkpoint& ckpt, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<int64_t, std::string>> work;  // (bytes, name), largest first
  ScanReport r;
  for (const auto& name : ckpt.tensor_names()) {
    const int64_t b = static_cast<int64_t>(ckpt.raw(name).bytes.size());
    work.emplace_back(b, name);
    r.bytes += b;
  }
  std::sort(work.begin(), work.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  r.tensors = static_cast<int64_t>(work.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < work.size(); i = next++) {
      try {
        check_tensor(ckpt, work[i].second);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min<int>(threads, static_cast<int>(work.size())); ++t) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace mla::io
