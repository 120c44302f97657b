#pragma once
// Host-side CUDA helpers for everything that calls the runtime (the kernels' launchers, the CUDA
// backends of lib/verify, the NCCL communicator, mla-bench, the GPU tests): one error check (what
// failed and cudaGetErrorString), one device-buffer RAII type, the device's multiprocessor count
// and the once-per-kernel-and-device shared-memory limit. Header-only, plain C++ (no device code).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace mla::cuda {

// Throws mla::Error "<prefix>: <what>: <cudaGetErrorString(e)>" unless e is cudaSuccess.
inline void check(cudaError_t e, std::string_view what, std::string_view prefix = "CUDA") {
  if (e != cudaSuccess)
    throw Error(std::string(prefix) + ": " + std::string(what) + ": " + cudaGetErrorString(e));
}

// Multiprocessors of the current device (default split counts scale with it).
inline int sm_count() {
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
  return sms;
}

// Devices on which a kernel's shared-memory limit has been raised: one per kernel instantiation, a
// static at the call site. The attribute belongs to a device's context, so a process whose threads
// drive several GPUs (the multi-GPU runner, mla-bench --tp) must raise it on each of them; a single
// process-wide flag let rank 2's first launch on GPU 2 fail with "invalid argument" (mla-bench --tp 4).
struct SmemLimitSet {
  std::atomic<uint64_t> devices{0};  // bit d: raised on device d (devices >= 64 raise it every launch)
};

// Raises a kernel's dynamic shared-memory limit to `bytes` on the current device, once per device.
// Two threads racing on one device both set the same value, which is harmless. `what` names the
// kernel in the error.
template <class Kernel>
void set_smem_limit_once(Kernel kernel, size_t bytes, SmemLimitSet& done, std::string_view what) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice", what);
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit && (done.devices.load(std::memory_order_acquire) & bit)) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
  done.devices.fetch_or(bit, std::memory_order_release);
}

// `count` elements of T on the current device (at least one element is allocated, so ptr is never
// null once sized). Movable, not copyable; freed on destruction.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;

  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : count(n) { check(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(std::exchange(o.ptr, nullptr)), count(std::exchange(o.count, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(count, o.count);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }

  size_t bytes() const { return count * sizeof(T); }
  // The memory as another element type (mla-bench's byte buffers feed kernels of several types).
  template <class U>
  U* as() const {
    return reinterpret_cast<U*>(ptr);
  }

  // Copies v to the device, growing the buffer first if v is longer.
  void upload(const std::vector<T>& v) {
    if (v.size() > count) *this = DeviceBuffer(v.size());
    check(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  // Copies the first n elements (all of them without n) back into v.
  void download(std::vector<T>& v, size_t n) const {
    v.resize(n);
    check(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  void download(std::vector<T>& v) const { download(v, count); }
  std::vector<T> download() const {
    std::vector<T> v;
    download(v, count);
    return v;
  }
};

}  // namespace mla::cuda
