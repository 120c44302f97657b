// mla-bench's shared device helpers (bench_device.hpp).
#include "bench_device.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <string>

#include "core/error.hpp"

namespace mla::bench {
namespace {

__global__ void fill_kernel(__nv_bfloat16* x, size_t n, uint32_t seed, float amp) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (seed + static_cast<uint32_t>(i >> 32));
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(amp * ((static_cast<float>(h & 0xFFFFFF) / 8388608.f) - 1.f));
  }
}

// n e4m3 bytes at x from the same hash, bits 6 and 3 cleared: magnitudes up to 2^-1 * 1.875,
// never the NaN encodings (0x7F, 0xFF), so the FP8 GEMM ceiling runs on ordinary values.
__global__ void fill_e4m3_kernel(uint8_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = static_cast<uint8_t>(h & 0xB7u);
  }
}

void check_lt(cublasStatus_t s, std::string_view what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error("cuBLASLt: " + std::string(what) + ": status " + std::to_string(static_cast<int>(s)));
}

// The median time of D (bf16) = A^T B over n x n e4m3 matrices through cuBLASLt (FP8 GEMMs take
// the transposed-A form), fp32 accumulation, its own algorithm choice and a 32 MB workspace.
double fp8_gemm_us(L2FlushTimer& timer, int n, int runs) {
  DeviceBytes a(size_t(n) * n), b(size_t(n) * n), d(size_t(n) * n * 2), ws(size_t(32) << 20);
  fill_e4m3_kernel<<<2048, 256>>>(a.as<uint8_t>(), a.bytes(), 3);
  fill_e4m3_kernel<<<2048, 256>>>(b.as<uint8_t>(), b.bytes(), 4);
  cuda::check(cudaGetLastError(), "e4m3 fill launch");
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  check_lt(cublasLtCreate(&lt), "create");
  // Released however the measurement ends.
  struct Release {
    cublasLtHandle_t& lt;
    cublasLtMatmulDesc_t& op;
    cublasLtMatrixLayout_t &la, &lb, &ld;
    ~Release() {
      if (ld) cublasLtMatrixLayoutDestroy(ld);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (op) cublasLtMatmulDescDestroy(op);
      if (lt) cublasLtDestroy(lt);
    }
  } release{lt, op, la, lb, ld};
  check_lt(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
  check_lt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
  check_lt(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n), "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n), "layout D");
  const float one = 1.f, zero = 0.f;
  return timer.median_us(
      [&] {
        check_lt(cublasLtMatmul(lt, op, &one, a.ptr, la, b.ptr, lb, &zero, d.ptr, ld, d.ptr, ld, nullptr, ws.ptr,
                                ws.bytes(), nullptr),
                 "matmul (FP8 GEMM ceiling)");
      },
      runs, 3);
}

// Streams a buffer once with 16-byte loads (read-bandwidth ceiling of a read-only kernel).
__global__ void read_stream(const uint4* x, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = x[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // keeps the loads alive; practically never stores
}

}  // namespace

void check_cublas(cublasStatus_t s, std::string_view what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error("cuBLAS: " + std::string(what) + ": status " + std::to_string(static_cast<int>(s)));
}

void fill_bf16(void* x, size_t n, uint32_t seed, float amp, cudaStream_t stream) {
  fill_kernel<<<2048, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(x), n, seed, amp);
  cuda::check(cudaGetLastError(), "bf16 fill launch");
}

L2FlushTimer::L2FlushTimer(size_t l2_bytes) : flush_(2 * l2_bytes) {
  cuda::check(cudaEventCreate(&a_), "event create");
  cuda::check(cudaEventCreate(&b_), "event create");
}

L2FlushTimer::~L2FlushTimer() {
  cudaEventDestroy(a_);
  cudaEventDestroy(b_);
}

Ceilings measure_ceilings(L2FlushTimer& timer, int sms, int runs) {
  Ceilings c;
  const size_t bytes = size_t(1) << 30;
  {
    DeviceBytes src(bytes), dst(bytes), sink(16);
    cuda::check(cudaMemset(src.ptr, 1, bytes), "memset");
    const double copy_us = timer.median_us(
        [&] { cuda::check(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice), "copy ceiling"); }, runs,
        3);
    const double read_us = timer.median_us(
        [&] { read_stream<<<sms * 8, 512>>>(src.as<uint4>(), bytes / 16, sink.as<unsigned>()); }, runs, 3);
    cuda::check(cudaGetLastError(), "read ceiling launch");
    c.copy_gbs = 2.0 * bytes / (copy_us * 1e-6) / 1e9;  // bytes read + written
    c.read_gbs = double(bytes) / (read_us * 1e-6) / 1e9;
  }
  const int n = 8192;
  DeviceBytes a(size_t(n) * n * 2), b(size_t(n) * n * 2), d(size_t(n) * n * 2);
  fill_bf16(a.ptr, size_t(n) * n, 1);
  fill_bf16(b.ptr, size_t(n) * n, 2);
  cublasHandle_t h;
  check_cublas(cublasCreate(&h), "cublasCreate");
  const float one = 1.f, zero = 0.f;
  auto gemm = [&] {
    check_cublas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.ptr, CUDA_R_16BF, n, b.ptr, CUDA_R_16BF, n,
                              &zero, d.ptr, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (GEMM ceiling)");
  };
  const double us = timer.median_us(gemm, runs, 3);
  cublasDestroy(h);
  c.gemm_tflops = 2.0 * n * n * double(n) / (us * 1e-6) / 1e12;
  c.fp8_gemm_tflops = 2.0 * n * n * double(n) / (fp8_gemm_us(timer, n, runs) * 1e-6) / 1e12;
  return c;
}

}  // namespace mla::bench
