// Decode timing and device ceilings, measured in the same process, same conditions:
// L2 flushed (a memset over 2x the L2 size) before every timed run, CUDA events around the
// timed region only, median of runs after warm-up.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"
#include "core/error.hpp"
#include "kernels/mla_decode.hpp"

namespace mla::bench {
namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { ck(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc"); }
  ~Dev() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// Deterministic pseudo-random bf16 in about [-1, 1] (hash of the index): fills GBs fast.
__global__ void fill_bf16(__nv_bfloat16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (seed + static_cast<uint32_t>(i >> 32));
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xFFFFFF) / 8388608.f) - 1.f);
  }
}

// Streams a buffer once with 16-byte loads (read-bandwidth ceiling of a read-only kernel).
__global__ void read_stream(const uint4* x, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = x[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // keeps the loads alive; practically never stores
}

class Timer {
 public:
  explicit Timer(size_t l2_bytes) : flush_(2 * l2_bytes), flush_bytes_(2 * l2_bytes) {
    ck(cudaEventCreate(&a_), "event");
    ck(cudaEventCreate(&b_), "event");
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  // Median microseconds of fn over `runs` timed calls, each after an L2 flush.
  template <class F>
  double median_us(F&& fn, int runs, int warmup) {
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
      ck(cudaMemsetAsync(flush_.p, i & 0xFF, flush_bytes_), "L2 flush");
      ck(cudaEventRecord(a_), "record");
      fn();
      ck(cudaEventRecord(b_), "record");
      ck(cudaEventSynchronize(b_), "sync");
      float ms = 0.f;
      ck(cudaEventElapsedTime(&ms, a_, b_), "elapsed");
      t.push_back(ms * 1e3);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

 private:
  Dev flush_;
  size_t flush_bytes_;
  cudaEvent_t a_, b_;
};

double gemm_tflops(Timer& timer, int runs) {
  const int n = 8192;
  Dev a(size_t(n) * n * 2), b(size_t(n) * n * 2), c(size_t(n) * n * 2);
  fill_bf16<<<1024, 256>>>(a.as<__nv_bfloat16>(), size_t(n) * n, 1);
  fill_bf16<<<1024, 256>>>(b.as<__nv_bfloat16>(), size_t(n) * n, 2);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  const float one = 1.f, zero = 0.f;
  auto gemm = [&] {
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p, CUDA_R_16BF, n, &zero, c.p,
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      throw Error("cublasGemmEx failed");
  };
  const double us = timer.median_us(gemm, runs, 3);
  cublasDestroy(h);
  return 2.0 * n * n * double(n) / (us * 1e-6) / 1e12;
}

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

std::string run_bench(const Options& o) {
  nlohmann::json j;
  int dev = 0;
  ck(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, dev), "device properties");
  j["device"] = prop.name;
  j["sms"] = prop.multiProcessorCount;
  j["l2_bytes"] = prop.l2CacheSize;
  Timer timer(static_cast<size_t>(prop.l2CacheSize));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  if (o.ceilings) {
    const size_t bytes = size_t(1) << 30;
    Dev src(bytes), dst(bytes), sink(16);
    ck(cudaMemset(src.p, 1, bytes), "memset");
    const double copy_us = timer.median_us([&] { ck(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice), "copy"); },
                                           20, 3);
    const double read_us = timer.median_us(
        [&] { read_stream<<<prop.multiProcessorCount * 8, 512>>>(src.as<uint4>(), bytes / 16, sink.as<unsigned>()); }, 20, 3);
    j["copy_gbs"] = 2.0 * bytes / (copy_us * 1e-6) / 1e9;  // bytes read + written
    j["read_gbs"] = double(bytes) / (read_us * 1e-6) / 1e9;
    j["gemm_tflops"] = gemm_tflops(timer, 20);
    std::printf("ceilings: copy %.0f GB/s (read+write, 1 GiB memcpy), read %.0f GB/s (streaming kernel), "
                "cuBLAS bf16 GEMM 8192^3 %.1f TFLOP/s\n",
                j["copy_gbs"].get<double>(), j["read_gbs"].get<double>(), j["gemm_tflops"].get<double>());
  }

  // ---- the decode problem: B requests, pages in a random permutation of the pool ----
  const int dim = o.d_c + o.d_r;
  std::vector<int32_t> seqlens(o.batch, o.seqlen);
  std::mt19937_64 rng(42);
  if (o.varied)
    for (auto& L : seqlens) L = std::max(1, o.seqlen / 2 + static_cast<int>(rng() % std::max(1, o.seqlen)));
  int max_pages = 1;
  long long total_pages = 0, total_tokens = 0;
  for (int L : seqlens) {
    const int np = (L + o.page - 1) / o.page;
    max_pages = std::max(max_pages, np);
    total_pages += np;
    total_tokens += L;
  }
  std::vector<int32_t> perm(total_pages);
  std::iota(perm.begin(), perm.end(), 0);
  if (!o.sequential_pages) std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(size_t(o.batch) * max_pages, 0);
  long long next = 0;
  for (int b = 0; b < o.batch; ++b)
    for (int i = 0; i < (seqlens[b] + o.page - 1) / o.page; ++i) table[size_t(b) * max_pages + i] = perm[next++];

  const size_t rows = size_t(o.s_q) * o.heads;
  const size_t cache_elems = size_t(total_pages) * o.page * dim;
  Dev q(size_t(o.batch) * rows * dim * 2), cache(cache_elems * 2), out(size_t(o.batch) * rows * o.d_c * 2),
      lse(size_t(o.batch) * rows * 4), d_table(table.size() * 4), d_seq(seqlens.size() * 4);
  fill_bf16<<<4096, 256>>>(cache.as<__nv_bfloat16>(), cache_elems, 7);
  fill_bf16<<<1024, 256>>>(q.as<__nv_bfloat16>(), size_t(o.batch) * rows * dim, 8);
  ck(cudaMemcpy(d_table.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "upload");
  ck(cudaMemcpy(d_seq.p, seqlens.data(), seqlens.size() * 4, cudaMemcpyHostToDevice), "upload");

  kernels::Bf16DecodeParams p;
  p.q = q.as<uint16_t>();
  p.kv_cache = cache.as<uint16_t>();
  p.page_table = d_table.as<int32_t>();
  p.seqlens = d_seq.as<int32_t>();
  p.out = out.as<uint16_t>();
  p.lse = lse.as<float>();
  p.batch = o.batch;
  p.s_q = o.s_q;
  p.heads = o.heads;
  p.d_c = o.d_c;
  p.d_r = o.d_r;
  p.num_pages = static_cast<int>(total_pages);
  p.page_size = o.page;
  p.max_pages = max_pages;
  p.scale = 1.f / std::sqrt(static_cast<float>(192));
  p.variant = o.variant;
  p.num_parts = kernels::decode_parts_for_device(p);
  const size_t ws_bytes = kernels::decode_workspace_bytes_for(p);
  Dev ws(ws_bytes);
  p.workspace = ws.p;
  p.workspace_bytes = ws_bytes;
  const double us = timer.median_us([&] { kernels::mla_decode_bf16(p, nullptr); }, o.runs, o.warmup);
  ck(cudaDeviceSynchronize(), "decode");

  // Fewest bytes: every cache row read once, q read once, out + lse written once.
  const double bytes = double(total_tokens) * dim * 2 + double(o.batch) * rows * (dim * 2 + o.d_c * 2 + 4);
  const double flops = 2.0 * double(total_tokens) * rows * (dim + o.d_c);
  j["shape"] = {{"batch", o.batch}, {"heads", o.heads}, {"d_c", o.d_c}, {"d_r", o.d_r}, {"seqlen", o.seqlen},
                {"page", o.page}, {"s_q", o.s_q}, {"varied", o.varied}, {"sequential_pages", o.sequential_pages}};
  j["variant"] = o.variant;
  j["decode_us"] = us;
  j["bytes"] = bytes;
  j["flops"] = flops;
  j["gbs"] = bytes / (us * 1e-6) / 1e9;
  j["tflops"] = flops / (us * 1e-6) / 1e12;
  j["parts"] = p.num_parts;
  std::printf("decode%s B=%d H=%d s_q=%d d_c=%d d_r=%d L=%d%s%s page=%d: %.1f us, %.0f GB/s, %.1f TFLOP/s", o.variant == 7 ? "[mma.sync 64-row]" : "", o.batch, o.heads,
              o.s_q, o.d_c, o.d_r, o.seqlen, o.varied ? " (varied)" : "", o.sequential_pages ? " (sequential pages)" : "", o.page, us, j["gbs"].get<double>(),
              j["tflops"].get<double>());
  if (o.ceilings) {
    j["frac_read_bw"] = j["gbs"].get<double>() / j["read_gbs"].get<double>();
    j["frac_copy_bw"] = j["gbs"].get<double>() / j["copy_gbs"].get<double>();
    j["frac_gemm"] = j["tflops"].get<double>() / j["gemm_tflops"].get<double>();
    std::printf(" | %.0f%% of read BW, %.0f%% of copy BW, %.0f%% of GEMM rate", 100 * j["frac_read_bw"].get<double>(),
                100 * j["frac_copy_bw"].get<double>(), 100 * j["frac_gemm"].get<double>());
  }
  std::printf("\n");

  if (o.torch_baseline) {
    const std::string cmd = o.python + " " + shell_quote(std::string(MLA_BENCH_SCRIPT_DIR) + "/torch_baseline.py") +
                            " --batch " + std::to_string(o.batch) + " --heads " + std::to_string(o.heads * o.s_q) +
                            " --dc " + std::to_string(o.d_c) + " --dr " + std::to_string(o.d_r) + " --seqlen " +
                            std::to_string(o.seqlen) + " --runs " + std::to_string(std::min(o.runs, 30));
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    if (!pipe) throw Error("cannot run " + cmd);
    std::string text;
    char buf[4096];
    while (fgets(buf, sizeof buf, pipe.get())) text += buf;
    const auto pos = text.rfind("{");
    if (pos == std::string::npos) throw Error("torch baseline printed no JSON: " + text);
    const auto tj = nlohmann::json::parse(text.substr(pos));
    const double tus = tj["us"].get<double>();
    j["torch_us"] = tus;
    j["speedup_vs_torch"] = tus / us;
    std::printf("pytorch einsum/softmax/einsum (contiguous per-request cache, gather not timed): %.1f us, %.0f GB/s, "
                "%.1f TFLOP/s -> kernel is %.2fx faster\n",
                tus, bytes / (tus * 1e-6) / 1e9, flops / (tus * 1e-6) / 1e12, tus / us);
  }
  return j.dump(2);
}

}  // namespace mla::bench
