// Decode timing and device ceilings, measured in the same process, same conditions:
// L2 flushed (a memset over 2x the L2 size) before every timed run, CUDA events around the
// timed region only, median of runs after warm-up.
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
#include "bench_device.hpp"
#include "capi_common.hpp"
#include "core/error.hpp"
#include "kernels/mla_decode.hpp"

namespace mla::bench {
namespace {

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

PagedProblem make_paged_problem(const Options& o) {
  PagedProblem pb;
  pb.seqlens.assign(o.batch, o.seqlen);
  std::mt19937_64 rng(42);
  if (o.varied)
    for (auto& L : pb.seqlens) L = std::max(1, o.seqlen / 2 + static_cast<int>(rng() % std::max(1, o.seqlen)));
  for (int L : pb.seqlens) {
    const int np = (L + o.page - 1) / o.page;
    pb.max_pages = std::max(pb.max_pages, np);
    pb.total_pages += np;
    pb.total_tokens += L;
  }
  std::vector<int32_t> perm(pb.total_pages);
  std::iota(perm.begin(), perm.end(), 0);
  if (!o.sequential_pages) std::shuffle(perm.begin(), perm.end(), rng);
  pb.table.assign(size_t(o.batch) * pb.max_pages, 0);
  long long next = 0;
  for (int b = 0; b < o.batch; ++b)
    for (int i = 0; i < (pb.seqlens[b] + o.page - 1) / o.page; ++i) pb.table[size_t(b) * pb.max_pages + i] = perm[next++];
  return pb;
}

cudaDeviceProp describe_device(nlohmann::json& j) {
  int dev = 0;
  cuda::check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, dev), "device properties");
  j["device"] = prop.name;
  j["sms"] = prop.multiProcessorCount;
  j["l2_bytes"] = prop.l2CacheSize;
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  return prop;
}

void report_ceilings(nlohmann::json& j, L2FlushTimer& timer, int sms) {
  const Ceilings c = measure_ceilings(timer, sms, 20);
  j["copy_gbs"] = c.copy_gbs;
  j["read_gbs"] = c.read_gbs;
  j["gemm_tflops"] = c.gemm_tflops;
  j["fp8_gemm_tflops"] = c.fp8_gemm_tflops;
  std::printf("ceilings: copy %.0f GB/s (read+write, 1 GiB memcpy), read %.0f GB/s (streaming kernel), "
              "cuBLAS bf16 GEMM 8192^3 %.1f TFLOP/s, cuBLASLt fp8 GEMM 8192^3 %.1f TFLOP/s\n",
              c.copy_gbs, c.read_gbs, c.gemm_tflops, c.fp8_gemm_tflops);
}

std::string run_bench(const Options& o) {
  nlohmann::json j;
  const cudaDeviceProp prop = describe_device(j);
  L2FlushTimer timer(static_cast<size_t>(prop.l2CacheSize));
  if (o.ceilings) report_ceilings(j, timer, prop.multiProcessorCount);

  // ---- the decode problem: B requests, pages in a random permutation of the pool ----
  const int dim = o.d_c + o.d_r;
  const PagedProblem pb = make_paged_problem(o);
  const std::vector<int32_t>& seqlens = pb.seqlens;
  const int max_pages = pb.max_pages;
  const long long total_pages = pb.total_pages, total_tokens = pb.total_tokens;

  const size_t rows = size_t(o.s_q) * o.heads;
  const size_t cache_elems = size_t(total_pages) * o.page * dim;
  DeviceBytes q(size_t(o.batch) * rows * dim * 2), cache(cache_elems * 2), out(size_t(o.batch) * rows * o.d_c * 2),
      lse(size_t(o.batch) * rows * 4);
  const cuda::DeviceBuffer<int32_t> d_table(pb.table), d_seq(seqlens);
  fill_bf16(cache.ptr, cache_elems, 7);
  fill_bf16(q.ptr, size_t(o.batch) * rows * dim, 8);

  kernels::Bf16DecodeParams p = capi::decode_params<kernels::Bf16DecodeParams>(
      d_table.ptr, d_seq.ptr, out.ptr, lse.as<float>(), o.batch, o.s_q, o.heads, o.d_c, o.d_r,
      static_cast<int>(total_pages), o.page, max_pages, 1.f / std::sqrt(192.f));
  p.q = q.as<uint16_t>();
  p.kv_cache = cache.as<uint16_t>();
  p.variant = o.variant;
  p.num_parts = kernels::decode_parts_for_device(p);
  const size_t ws_bytes = kernels::decode_workspace_bytes_for(p);
  DeviceBytes ws(ws_bytes);
  p.workspace = ws.ptr;
  p.workspace_bytes = ws_bytes;
  const double us = timer.median_us([&] { kernels::mla_decode_bf16(p, nullptr); }, o.runs, o.warmup);
  cuda::check(cudaDeviceSynchronize(), "decode");

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
