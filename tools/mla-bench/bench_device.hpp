#pragma once
// What the three mla-bench modes (decode, --prefix, --tp) share on the device: the deterministic
// BF16 fill, the L2-flushed event timer and the single-GPU ceilings (copy and read bandwidth,
// cuBLAS BF16 GEMM rate). Errors go through kernels/cuda_check.hpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "kernels/cuda_check.hpp"

namespace mla::bench {

// Byte buffers: the benchmarks size everything in bytes and view it as the kernels' types.
using DeviceBytes = cuda::DeviceBuffer<unsigned char>;

// Throws mla::Error "cuBLAS: <what>: status <s>" unless s is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t s, std::string_view what);

// n bf16 values at x, uniform in about [-amp, amp], a hash of the index (fills GBs fast; the same
// values for any launch shape).
void fill_bf16(void* x, size_t n, uint32_t seed, float amp = 1.f, cudaStream_t stream = nullptr);

// Median microseconds of a callable, each timed call after a memset over 2x the L2 size (nothing
// the previous call left in L2 is reused), CUDA events around the call only.
class L2FlushTimer {
 public:
  explicit L2FlushTimer(size_t l2_bytes);
  ~L2FlushTimer();
  L2FlushTimer(const L2FlushTimer&) = delete;
  L2FlushTimer& operator=(const L2FlushTimer&) = delete;

  template <class F>
  double median_us(F&& fn, int runs, int warmup) {
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
      cuda::check(cudaMemsetAsync(flush_.ptr, i & 0xFF, flush_.bytes()), "L2 flush");
      cuda::check(cudaEventRecord(a_), "event record");
      fn();
      cuda::check(cudaEventRecord(b_), "event record");
      cuda::check(cudaEventSynchronize(b_), "event synchronize");
      float ms = 0.f;
      cuda::check(cudaEventElapsedTime(&ms, a_, b_), "event elapsed time");
      t.push_back(ms * 1e3);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

 private:
  DeviceBytes flush_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

// The current device's ceilings, each the median of `runs` timed calls after 3 warm-up calls:
// copy (1 GiB device-to-device memcpy, bytes read + written), read (a streaming kernel with
// 16-byte loads over the same GiB, sms * 8 blocks), cuBLAS BF16 GEMM 8192^3 (fp32 accumulation),
// cuBLASLt FP8 (e4m3 x e4m3 -> bf16, fp32 accumulation) GEMM 8192^3.
struct Ceilings {
  double copy_gbs = 0, read_gbs = 0, gemm_tflops = 0, fp8_gemm_tflops = 0;
};
Ceilings measure_ceilings(L2FlushTimer& timer, int sms, int runs);

// The current device's name, SMs and L2 size, printed and recorded in j (bench.cu).
cudaDeviceProp describe_device(nlohmann::json& j);
// measure_ceilings (20 runs), printed and recorded in j as copy_gbs, read_gbs, gemm_tflops,
// fp8_gemm_tflops.
void report_ceilings(nlohmann::json& j, L2FlushTimer& timer, int sms);

}  // namespace mla::bench
