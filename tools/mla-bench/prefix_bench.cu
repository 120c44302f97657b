// mla-bench --prefix: shared-prefix decode timing (see prefix_bench.hpp). Same conditions as the
// decode benchmark: L2 flushed (memset over 2x L2) before every timed call, CUDA events around
// the call only, median of runs after warm-up.
//
// The cache is laid out as a serving engine with prefix caching would hold it: the prefix's
// whole pages are shared by every request; the absorb-only view of request b is those shared
// pages followed by private pages (the prefix's partial last page copied, then b's own tokens);
// the mixed step reads b's own tokens from their own pages and the prefix from its decompressed
// K/V. Own pages are a random permutation of the pool.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/mla_decode.hpp"
#include "kernels/prefix_attention.hpp"
#include "model/prefix_cost.hpp"
#include "prefix_bench.hpp"

namespace mla::bench {
namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("mla-bench --prefix: ") + what + ": " + cudaGetErrorString(e));
}

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : bytes(std::max<size_t>(n, 16)) { ck(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// Deterministic bf16 values uniform in [-amp, amp] (hash of the index).
__global__ void fill_uniform(__nv_bfloat16* x, size_t n, uint32_t seed, float amp) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (seed + static_cast<uint32_t>(i >> 32));
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(amp * ((static_cast<float>(h & 0xFFFFFF) / 8388608.f) - 1.f));
  }
}
void fill(const Buf& b, size_t elems, uint32_t seed, float amp = 1.f) {
  fill_uniform<<<2048, 256>>>(b.as<__nv_bfloat16>(), elems, seed, amp);
  ck(cudaGetLastError(), "fill");
}

__global__ void read_stream(const uint4* x, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = x[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

class Timer {
 public:
  explicit Timer(size_t l2) : flush_(2 * l2) {
    ck(cudaEventCreate(&a_), "event");
    ck(cudaEventCreate(&b_), "event");
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  template <class F>
  double median_us(F&& fn, int runs, int warmup) {
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
      ck(cudaMemsetAsync(flush_.p, i & 0xFF, flush_.bytes), "L2 flush");
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
  Buf flush_;
  cudaEvent_t a_, b_;
};

// This file is C++17 (CUDA_STANDARD 17), core/dtype.hpp is C++20.
float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Ceilings {
  double copy_gbs = 0, read_gbs = 0, gemm_tflops = 0;
};

Ceilings measure_ceilings(Timer& timer, int sms) {
  Ceilings c;
  const size_t bytes = size_t(1) << 30;
  {
    Buf src(bytes), dst(bytes), sink(16);
    ck(cudaMemset(src.p, 1, bytes), "memset");
    const double copy_us = timer.median_us([&] { ck(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice), "copy"); }, 15, 3);
    const double read_us = timer.median_us([&] { read_stream<<<sms * 8, 512>>>(src.as<uint4>(), bytes / 16, sink.as<unsigned>()); }, 15, 3);
    c.copy_gbs = 2.0 * bytes / (copy_us * 1e-6) / 1e9;
    c.read_gbs = double(bytes) / (read_us * 1e-6) / 1e9;
  }
  const int n = 8192;
  Buf a(size_t(n) * n * 2), b(size_t(n) * n * 2), d(size_t(n) * n * 2);
  fill(a, size_t(n) * n, 1);
  fill(b, size_t(n) * n, 2);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  const float one = 1.f, zero = 0.f;
  auto gemm = [&] {
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p, CUDA_R_16BF, n, &zero, d.p,
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      throw Error("cublasGemmEx failed");
  };
  const double us = timer.median_us(gemm, 15, 3);
  cublasDestroy(h);
  c.gemm_tflops = 2.0 * n * n * double(n) / (us * 1e-6) / 1e12;
  return c;
}

constexpr int kDc = 512, kDr = 64, kDn = 128, kDv = 128;

// One (H, L_s) prefix: latent rows in shared pages, kv_b_proj, the decompressed K/V.
struct Prefix {
  int heads, len, page, pages;
  Buf latent, kv_b, k, v;
  std::vector<int32_t> table;
  Buf d_table;
  double decompress_us = 0;
  Prefix(int H, int L, int page_size, Timer& timer)
      : heads(H), len(L), page(page_size), pages((L + page_size - 1) / page_size),
        latent(size_t(pages) * page_size * (kDc + kDr) * 2), kv_b(size_t(H) * (kDn + kDv) * kDc * 2),
        k(size_t(L) * H * (kDn + kDr) * 2), v(size_t(L) * H * kDv * 2), table(pages), d_table(size_t(pages) * 4) {
    fill(latent, size_t(pages) * page * (kDc + kDr), 11);
    fill(kv_b, size_t(H) * (kDn + kDv) * kDc, 12, std::sqrt(3.f / kDc));
    std::iota(table.begin(), table.end(), 0);
    ck(cudaMemcpy(d_table.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "upload");
    quant::PrefixDecompressParams p;
    p.kv_cache = latent.as<uint16_t>();
    p.page_table = d_table.as<int32_t>();
    p.kv_b = kv_b.as<uint16_t>();
    p.k = k.as<uint16_t>();
    p.v = v.as<uint16_t>();
    p.prefix_len = L;
    p.num_pages = pages;
    p.page_size = page;
    p.max_pages = pages;
    p.heads = H;
    p.d_c = kDc;
    p.d_r = kDr;
    p.d_n = kDn;
    p.d_v = kDv;
    decompress_us = timer.median_us([&] { kernels::prefix_decompress_bf16(p, nullptr); }, 3, 1);
  }
};

struct Timing {
  int batch = 0;
  double mixed_us = 0, absorb_us = 0, absorb_core_us = 0, prefix_us = 0, suffix_us = 0, merge_us = 0, expand_us = 0;
  // Outputs of the mixed step (poisoned before the call) that are not finite: the bench's own
  // check that every output was written, at full size.
  long long nonfinite = 0;
  int splits = 0;
};

// Times one batch on a prefix: the mixed step (forced), absorb-only (forced) and their parts.
Timing time_batch(const Prefix& pre, int B, const PrefixOptions& o, Timer& timer, bool parts) {
  const int H = pre.heads, page = pre.page, dim = kDc + kDr;
  const int shared_pages = pre.len / page;                       // whole prefix pages, shared
  const int private_tokens = pre.len - shared_pages * page + o.suffix;  // prefix tail copy + own tokens
  const int private_pages = (private_tokens + page - 1) / page;
  const int own_pages = (o.suffix + page - 1) / page;
  // Pool: [prefix pages (the Prefix's own buffer is separate) | own pages | private pages].
  const long long pool_pages = static_cast<long long>(pre.pages) + static_cast<long long>(B) * (own_pages + private_pages);
  Buf pool(size_t(pool_pages) * page * dim * 2);
  fill(pool, size_t(pool_pages) * page * dim, 21);
  ck(cudaMemcpy(pool.p, pre.latent.p, size_t(pre.pages) * page * dim * 2, cudaMemcpyDeviceToDevice), "copy prefix");
  std::vector<int32_t> perm(static_cast<size_t>(B) * (own_pages + private_pages));
  std::iota(perm.begin(), perm.end(), pre.pages);
  std::mt19937_64 rng(42 + B);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int full_max = shared_pages + private_pages;
  std::vector<int32_t> own_table(size_t(B) * own_pages), full_table(size_t(B) * full_max);
  size_t next = 0;
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < own_pages; ++i) own_table[size_t(b) * own_pages + i] = perm[next++];
    for (int i = 0; i < shared_pages; ++i) full_table[size_t(b) * full_max + i] = pre.table[i];
    for (int i = 0; i < private_pages; ++i) full_table[size_t(b) * full_max + shared_pages + i] = perm[next++];
  }
  std::vector<int32_t> own_len(B, o.suffix), full_len(B, pre.len + o.suffix);
  Buf d_own_table(own_table.size() * 4), d_full_table(full_table.size() * 4), d_own_len(B * 4), d_full_len(B * 4);
  ck(cudaMemcpy(d_own_table.p, own_table.data(), own_table.size() * 4, cudaMemcpyHostToDevice), "upload");
  ck(cudaMemcpy(d_full_table.p, full_table.data(), full_table.size() * 4, cudaMemcpyHostToDevice), "upload");
  ck(cudaMemcpy(d_own_len.p, own_len.data(), B * 4, cudaMemcpyHostToDevice), "upload");
  ck(cudaMemcpy(d_full_len.p, full_len.data(), B * 4, cudaMemcpyHostToDevice), "upload");
  const size_t rows = size_t(B) * o.s_q;
  Buf q_abs(rows * H * dim * 2), q_naive(rows * H * (kDn + kDr) * 2), o_lat(rows * H * kDc * 2), lse_lat(rows * H * 4),
      out(rows * H * kDv * 2), lse(rows * H * 4);
  fill(q_abs, rows * H * dim, 31, 0.05f);
  fill(q_naive, rows * H * (kDn + kDr), 32);

  quant::MixedDecodeParams p;
  for (quant::Bf16DecodeParams* d : {&p.suffix, &p.full}) {
    d->q = q_abs.as<uint16_t>();
    d->kv_cache = pool.as<uint16_t>();
    d->out = o_lat.as<uint16_t>();
    d->lse = lse_lat.as<float>();
    d->batch = B;
    d->s_q = o.s_q;
    d->heads = H;
    d->d_c = kDc;
    d->d_r = kDr;
    d->num_pages = static_cast<int>(pool_pages);
    d->page_size = page;
    d->scale = 1.f / std::sqrt(float(kDn + kDr));
  }
  p.suffix.page_table = d_own_table.as<int32_t>();
  p.suffix.seqlens = d_own_len.as<int32_t>();
  p.suffix.max_pages = own_pages;
  p.full.page_table = d_full_table.as<int32_t>();
  p.full.seqlens = d_full_len.as<int32_t>();
  p.full.max_pages = full_max;
  Buf ws_suffix(kernels::decode_workspace_bytes_for(p.suffix)), ws_full(kernels::decode_workspace_bytes_for(p.full));
  p.suffix.workspace = ws_suffix.p;
  p.suffix.workspace_bytes = ws_suffix.bytes;
  p.full.workspace = ws_full.p;
  p.full.workspace_bytes = ws_full.bytes;
  p.q_naive = q_naive.as<uint16_t>();
  p.prefix_k = pre.k.as<uint16_t>();
  p.prefix_v = pre.v.as<uint16_t>();
  p.prefix_len = pre.len;
  p.kv_b = pre.kv_b.as<uint16_t>();
  p.d_n = kDn;
  p.d_v = kDv;
  p.out = out.as<uint16_t>();
  p.lse = lse.as<float>();
  p.b_theta = 0.0;  // mixed
  Buf ws_prefix(kernels::mixed_prefix_workspace_bytes(p));
  p.prefix_workspace = ws_prefix.p;
  p.prefix_workspace_bytes = ws_prefix.bytes;

  Timing t;
  t.batch = B;
  t.splits = kernels::mixed_prefix_splits(p);
  quant::MixedDecodeParams absorb = p;
  absorb.b_theta = std::numeric_limits<double>::infinity();
  // Interleaved: absorb-only and mixed alternate (same thermal and clock conditions).
  std::vector<double> tm, ta;
  for (int rep = 0; rep < 3; ++rep) {
    ta.push_back(timer.median_us([&] { kernels::mixed_decode_bf16(absorb, nullptr); }, o.runs, rep == 0 ? o.warmup : 0));
    tm.push_back(timer.median_us([&] { kernels::mixed_decode_bf16(p, nullptr); }, o.runs, rep == 0 ? o.warmup : 0));
  }
  std::sort(tm.begin(), tm.end());
  std::sort(ta.begin(), ta.end());
  t.mixed_us = tm[1];
  t.absorb_us = ta[1];
  ck(cudaDeviceSynchronize(), "mixed decode");
  if (parts) {
    t.absorb_core_us = timer.median_us([&] { kernels::mla_decode_bf16(p.full, nullptr); }, o.runs, 1);
    t.suffix_us = timer.median_us([&] { kernels::mla_decode_bf16(p.suffix, nullptr); }, o.runs, 1);
    quant::PrefixAttnParams ap;
    ap.q = p.q_naive;
    ap.k = p.prefix_k;
    ap.v = p.prefix_v;
    ap.part_lse = ws_prefix.as<float>();
    ap.part_o = reinterpret_cast<float*>(ws_prefix.as<char>() +
                                         (size_t(t.splits) * rows * H * sizeof(float) + 255) / 256 * 256);
    ap.rows = static_cast<int>(rows);
    ap.heads = H;
    ap.d_n = kDn;
    ap.d_r = kDr;
    ap.d_v = kDv;
    ap.prefix_len = pre.len;
    ap.splits = t.splits;
    ap.scale = p.suffix.scale;
    t.prefix_us = timer.median_us([&] { kernels::prefix_attn_bf16(ap, nullptr); }, o.runs, 1);
    quant::PrefixMergeParams mp;
    mp.o_lat = o_lat.as<uint16_t>();
    mp.lse_lat = lse_lat.as<float>();
    mp.kv_b = p.kv_b;
    mp.out = out.as<uint16_t>();
    mp.lse = lse.as<float>();
    mp.rows = static_cast<int>(rows);
    mp.heads = H;
    mp.d_c = kDc;
    mp.d_n = kDn;
    mp.d_v = kDv;
    t.expand_us = timer.median_us([&] { kernels::prefix_merge_bf16(mp, nullptr); }, o.runs, 1);
    mp.part_o = ap.part_o;
    mp.part_lse = ap.part_lse;
    mp.splits = t.splits;
    t.merge_us = timer.median_us([&] { kernels::prefix_merge_bf16(mp, nullptr); }, o.runs, 1);
    ck(cudaDeviceSynchronize(), "parts");
    std::vector<uint16_t> host(rows * H * kDv);
    ck(cudaMemset(out.p, 0xFF, out.bytes), "poison");
    kernels::mixed_decode_bf16(p, nullptr);
    ck(cudaMemcpy(host.data(), out.p, host.size() * 2, cudaMemcpyDeviceToHost), "download");
    for (uint16_t v : host) t.nonfinite += std::isfinite(bf16_value(v)) ? 0 : 1;
  }
  return t;
}

// First batch where mixed beats absorb-only, interpolated linearly in log(t_absorb / t_mixed)
// between the bracketing measured batches; NaN when no crossing lies inside the range.
double crossover(std::vector<Timing> ts) {
  std::sort(ts.begin(), ts.end(), [](const Timing& a, const Timing& b) { return a.batch < b.batch; });
  for (size_t i = 0; i + 1 < ts.size(); ++i) {
    const double r0 = std::log(ts[i].absorb_us / ts[i].mixed_us), r1 = std::log(ts[i + 1].absorb_us / ts[i + 1].mixed_us);
    if (r0 < 0 && r1 >= 0) return ts[i].batch + (ts[i + 1].batch - ts[i].batch) * (-r0) / (r1 - r0);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

std::string run_prefix_bench(const PrefixOptions& o) {
  if (o.suffix < o.s_q) throw InputError("--suffix = " + std::to_string(o.suffix) + " must be >= s_q");
  nlohmann::json j;
  int dev = 0;
  ck(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, dev), "device properties");
  Timer timer(static_cast<size_t>(prop.l2CacheSize));
  const Ceilings c = measure_ceilings(timer, prop.multiProcessorCount);
  j["device"] = prop.name;
  j["sms"] = prop.multiProcessorCount;
  j["copy_gbs"] = c.copy_gbs;
  j["read_gbs"] = c.read_gbs;
  j["gemm_tflops"] = c.gemm_tflops;
  std::printf("device: %s, %d SMs | ceilings: copy %.0f GB/s (read+write), read %.0f GB/s, cuBLAS bf16 GEMM %.1f TFLOP/s\n",
              prop.name, prop.multiProcessorCount, c.copy_gbs, c.read_gbs, c.gemm_tflops);
  std::fflush(stdout);
  for (int H : o.heads)
    for (int L : o.prefixes) {
      model::PrefixShape shape = H == 128 ? model::deepseek_v3_shape() : model::kimi_k2_shape();
      shape.heads = H;
      shape.s_q = o.s_q;
      const double b_theta = model::batch_threshold(shape, c.gemm_tflops * 1e12, c.copy_gbs * 1e9);
      const double b_theta_read = model::batch_threshold(shape, c.gemm_tflops * 1e12, c.read_gbs * 1e9);
      Prefix pre(H, L, o.page, timer);
      nlohmann::json js;
      js["heads"] = H;
      js["prefix"] = L;
      js["suffix"] = o.suffix;
      js["s_q"] = o.s_q;
      js["decompress_us"] = pre.decompress_us;
      js["b_theta_model"] = b_theta;
      js["b_theta_model_read_bw"] = b_theta_read;
      const model::PrefixMemory mem = model::prefix_memory(shape, 512, L, o.suffix);
      js["decompressed_prefix_mb"] = mem.decompressed_bytes / 1e6;
      std::printf("\nH=%d d_c=%d d_r=%d d_n=%d d_v=%d, shared prefix %d, own %d tokens per request, s_q=%d, page %d\n"
                  "  prefix decompress (once per prefix): %.1f us, %.0f MB of K/V\n"
                  "  %6s %10s %10s %7s | %9s %9s %9s %8s %7s %6s | %8s %7s | %s\n",
                  H, kDc, kDr, kDn, kDv, L, o.suffix, o.s_q, o.page, pre.decompress_us, mem.decompressed_bytes / 1e6,
                  "B", "absorb us", "mixed us", "speedup", "prefix us", "suffix us", "merge us", "splits", "pre TF/s",
                  "of GEMM", "model x", "abs TF/s", "non-finite outputs");
      std::vector<Timing> all;
      auto report = [&](const Timing& t, bool parts) {
        const model::PrefixCost cost = model::prefix_cost(shape, t.batch, L, o.suffix);
        const double T = c.gemm_tflops * 1e12 / 2, M = c.copy_gbs * 1e9;
        const double model_absorb = model::roofline_seconds(cost.absorb(), T, M);
        const double model_mixed = model::roofline_seconds(cost.mixed(), T, M);
        const double model_x = model_absorb / (t.batch >= b_theta ? model_mixed : model_absorb);
        const double abs_tflops = 2.0 * cost.absorb().macs / (t.absorb_core_us > 0 ? t.absorb_core_us : t.absorb_us) / 1e6;
        const double pre_tflops = parts && t.prefix_us > 0 ? 2.0 * cost.naive_shared.macs / t.prefix_us / 1e6 : 0.0;
        nlohmann::json r{{"batch", t.batch},         {"absorb_us", t.absorb_us},     {"mixed_us", t.mixed_us},
                         {"speedup", t.absorb_us / t.mixed_us}, {"splits", t.splits}, {"model_speedup", model_x},
                         {"model_absorb_us", model_absorb * 1e6}, {"model_mixed_us", model_mixed * 1e6}};
        if (parts) {
          r["absorb_core_us"] = t.absorb_core_us;
          r["prefix_us"] = t.prefix_us;
          r["suffix_us"] = t.suffix_us;
          r["merge_us"] = t.merge_us;
          r["expand_us"] = t.expand_us;
          r["prefix_tflops"] = pre_tflops;
          r["nonfinite_outputs"] = t.nonfinite;
          r["prefix_frac_gemm"] = pre_tflops / c.gemm_tflops;
          r["absorb_core_tflops"] = abs_tflops;
          r["absorb_frac_gemm"] = abs_tflops / c.gemm_tflops;
        }
        if (parts)
          std::printf("  %6d %10.1f %10.1f %6.2fx | %9.1f %9.1f %9.1f %8d %7.0f %5.0f%% | %7.2fx %7.0f | %lld\n", t.batch,
                      t.absorb_us, t.mixed_us, t.absorb_us / t.mixed_us, t.prefix_us, t.suffix_us, t.merge_us, t.splits,
                      pre_tflops, 100.0 * pre_tflops / c.gemm_tflops, model_x, abs_tflops, t.nonfinite);
        else
          std::printf("  %6d %10.1f %10.1f %6.2fx | (crossover sweep)\n", t.batch, t.absorb_us, t.mixed_us,
                      t.absorb_us / t.mixed_us);
        std::fflush(stdout);
        return r;
      };
      for (int B : o.batches) {
        const Timing t = time_batch(pre, B, o, timer, true);
        all.push_back(t);
        js["batches"].push_back(report(t, true));
      }
      for (int B : o.crossover_batches) {
        if (std::find(o.batches.begin(), o.batches.end(), B) != o.batches.end()) continue;
        const Timing t = time_batch(pre, B, o, timer, false);
        all.push_back(t);
        js["crossover_sweep"].push_back(report(t, false));
      }
      const double measured = crossover(all);
      js["crossover_measured"] = std::isnan(measured) ? nlohmann::json(nullptr) : nlohmann::json(measured);
      js["crossover_vs_model"] = std::isnan(measured) ? nlohmann::json(nullptr) : nlohmann::json(measured / b_theta);
      std::printf("  crossover: measured B = %s, model B_theta = %.1f (copy bandwidth; %.1f with read bandwidth)%s\n",
                  std::isnan(measured) ? "none in the range" : std::to_string(measured).c_str(), b_theta, b_theta_read,
                  std::isnan(measured) ? "" : (" -> measured / model = " + std::to_string(measured / b_theta)).c_str());
      j["shapes"].push_back(js);
    }
  return j.dump(2);
}

}  // namespace mla::bench
