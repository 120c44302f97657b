// Microbenchmark for the split-S design in docs/gpu-notes.md (session 16, "A design for the next
// attempt"): how long does it take two CTAs of a cluster to swap 16 KB of fp32 (a 64 x 64 partial S
// tile) through distributed shared memory, tile after tile, with st.async completing on the
// receiver's mbarrier (no cluster-scope release) and the receiver handing the buffer back with a
// remote mbarrier arrive? Each CTA pair runs `iters` exchanges, double-buffered, every SM busy
// (one pair per two SMs); thread 0 of each CTA times its loop with clock64, and the host times the
// whole launch with events. Prints ns and SM cycles per exchange and the bytes per SM per ns, to set
// against the ~1,100 tensor cycles a tile that design leaves per SM.
//
//   cmake --build build --target dsmem-bench && build/tools/mla-bench/dsmem-bench [iters] [work_cycles]
// (or alone: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I. -o /tmp/dsmem_bench tools/mla-bench/dsmem_bench.cu)
// work_cycles: a spin (in SM cycles) between receiving and sending, standing in for the softmax and
// the next partial S (0: back-to-back exchanges, the pure latency/bandwidth bound).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/decode_device.cuh"  // smem_u32, mbarrier init / expect_tx / wait

namespace {

using namespace mla::kernels::detail;

constexpr int kThreads = 128;
constexpr int kFloats = 64 * 64;                     // one partial S tile
constexpr int kBytes = kFloats * 4;                  // 16 KB
constexpr int kPerThread = kFloats / kThreads;       // 32 floats: 8 x 16-byte stores
constexpr size_t kSmem = 2 * kBytes + 64;            // two receive buffers, then 4 mbarriers

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

__device__ __forceinline__ uint32_t peer_addr(uint32_t local, uint32_t cta) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(local), "r"(cta));
  return r;
}
// Remote arrive, default (CTA-scope release) semantics, as CUTLASS's cluster pipelines.
__device__ __forceinline__ void mbar_arrive_remote(uint32_t remote_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar) : "memory");
}
__device__ __forceinline__ void st_async_v4(uint32_t remote, float4 v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(remote),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(remote_bar)
               : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// full[b] (this CTA's receive buffer b holds the peer's tile): armed here with 16 KB of tx;
// empty[b] (the peer has read what this CTA sent into its buffer b): one remote arrive per use.
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads, 1)
    exchange_kernel(int iters, int work_cycles, float* out, long long* cycles) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* recv = reinterpret_cast<float*>(smem);
  const uint32_t bars = smem_u32(smem + 2 * kBytes);  // full[0], full[1], empty[0], empty[1]
  const uint32_t peer = cluster_rank() ^ 1u;
  const int t = threadIdx.x;
  if (t == 0) {
    for (int i = 0; i < 2; ++i) {
      mbar_init(bars + 8 * i, 1);
      mbar_init(bars + 8 * (2 + i), 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    mbar_arrive_expect_tx(bars, kBytes);
    mbar_arrive_expect_tx(bars + 8, kBytes);
  }
  cluster_sync();
  float mine[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) mine[i] = static_cast<float>(blockIdx.x * kThreads + t + i);
  float acc = 0.f;
  const long long c0 = clock64();
  for (int it = 0; it < iters; ++it) {
    const int b = it & 1;
    const uint32_t phase = (it >> 1) & 1;
    // The peer has read our previous tile in its buffer b (two exchanges ago).
    if (it >= 2) mbar_wait(bars + 8 * (2 + b), phase ^ 1);
    const uint32_t dst = peer_addr(smem_u32(recv + b * kFloats), peer);
    const uint32_t dst_bar = peer_addr(bars + 8 * b, peer);
#pragma unroll
    for (int i = 0; i < kPerThread; i += 4)
      st_async_v4(dst + (t * kPerThread + i) * 4, make_float4(mine[i], mine[i + 1], mine[i + 2], mine[i + 3]), dst_bar);
    // The peer's tile in our buffer b.
    mbar_wait(bars + 8 * b, phase);
    const float* src = recv + b * kFloats + t * kPerThread;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) mine[i] += src[i];  // S = S_0 + S_1
    __syncthreads();  // every thread has read buffer b
    if (t == 0) {
      mbar_arrive_expect_tx(bars + 8 * b, kBytes);                   // re-armed before the peer may refill it
      mbar_arrive_remote(peer_addr(bars + 8 * (2 + b), peer));  // hand buffer b back
    }
    if (work_cycles > 0) {
      const long long w0 = clock64();
      while (clock64() - w0 < work_cycles) {
      }
    }
    acc += mine[0];
  }
  const long long c1 = clock64();
  cluster_sync();  // no CTA leaves while its peer may still write into it
  out[blockIdx.x * kThreads + t] = acc;
  if (t == 0) cycles[blockIdx.x] = c1 - c0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::printf("usage: dsmem-bench [iters=4096] [work_cycles=0]\n"
                "Pairs of CTAs (2-CTA clusters on every SM) swap 16 KB fp32 tiles through distributed shared\n"
                "memory (st.async into double-buffered receive buffers, mbarrier completion), iters times;\n"
                "work_cycles: a spin between receiving and sending (standing in for the softmax). Prints ns\n"
                "and SM cycles per exchange and the bytes received per SM per ns.\n");
    return 0;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int work = argc > 2 ? std::atoi(argv[2]) : 0;
  int dev = 0, sms = 0, clock_khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  CHECK(cudaFuncSetAttribute(exchange_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  const int ctas = sms / 2 * 2;
  float* out = nullptr;
  long long* cyc = nullptr;
  CHECK(cudaMalloc(&out, sizeof(float) * ctas * kThreads));
  CHECK(cudaMalloc(&cyc, sizeof(long long) * ctas));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  exchange_kernel<<<ctas, kThreads, kSmem>>>(64, work, out, cyc);  // warm-up
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(e0));
  exchange_kernel<<<ctas, kThreads, kSmem>>>(iters, work, out, cyc);
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  std::vector<long long> c(ctas);
  CHECK(cudaMemcpy(c.data(), cyc, sizeof(long long) * ctas, cudaMemcpyDeviceToHost));
  long long cmax = 0, csum = 0;
  for (long long v : c) {
    cmax = v > cmax ? v : cmax;
    csum += v;
  }
  const double ns_per = ms * 1e6 / iters;
  std::printf("device %s, %d SMs, %d CTAs (pairs), %d exchanges of %d bytes each way, work %d cycles\n", prop.name, sms,
              ctas, iters, kBytes, work);
  std::printf("launch: %.3f ms, %.1f ns per exchange; SM cycles per exchange: mean %.0f, max %.0f\n", ms, ns_per,
              static_cast<double>(csum) / ctas / iters, static_cast<double>(cmax) / iters);
  std::printf("bytes received per SM per ns: %.1f (all SMs: %.0f GB/s)\n", kBytes / ns_per,
              kBytes / ns_per * ctas);
  CHECK(cudaFree(out));
  CHECK(cudaFree(cyc));
  return 0;
}
