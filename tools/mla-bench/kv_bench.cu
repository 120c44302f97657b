// mla-bench --kv fp8 | fp4 | codebook: the quantised cache's decode timed beside the BF16 decode
// on the same values, lengths and page table, in one process, under the same conditions as the
// BF16 mode (L2 flushed before every timed call, median of runs). Every request's BF16 rows are
// generated in chunks and written by the product's append kernels into both caches (the BF16
// cache and the format's pages), so both decodes read the same tokens. Each route the shape has
// is timed: FP8 pages (kernels/fp8_decode.hpp), FP4 through BF16 tensor cores
// (kernels/kv4_decode.hpp) and through FP8 tensor cores (fp8_decode_fp4_cache_bf16q), the
// codebook through BF16 tensor cores; the FP8-tensor-core routes also planned (the schedule once,
// untimed, as a serving step's layers share it). The floor of a route is the larger of its bytes at the
// measured copy rate and its FLOPs at the measured GEMM rate of its tensor cores (BF16 or FP8).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench.hpp"
#include "bench_device.hpp"
#include "capi_common.hpp"
#include "core/error.hpp"
#include "kernels/cache_append.hpp"
#include "kernels/fp8_append.hpp"
#include "kernels/fp8_decode.hpp"
#include "kernels/kv4_append.hpp"
#include "kernels/kv4_decode.hpp"
#include "kernels/mla_decode.hpp"
#include "quant/codebook.hpp"
#include "quant/fp4_cache_layout.hpp"
#include "quant/fp8_cache_layout.hpp"

namespace mla::bench {
namespace {

// Tokens generated and appended per call (per request): 4096 x 576 bf16 = 4.7 MB of staging.
constexpr int kChunk = 4096;
// FP4's scale constant: the value mla-calibrate fits on the tiny models (SPEC section 4); the
// decode's time does not depend on it.
constexpr float kFp4C = 0.197f;

// One timed decode: a name, its cache bytes per token, whether BF16 tensor cores bound it, and
// the call (its first call allocates the route's workspace, outside the timing).
struct Route {
  std::string name;
  size_t bytes_per_token = 0;
  bool bf16_math = true;
  std::function<void()> run;
};

// Fills every request's rows chunk by chunk (seed per request and chunk) and hands each chunk to
// `append` with batch 1: the page table row of request b, positions = the chunk's start.
template <class Append>
void fill_caches(const PagedProblem& pb, int dim, Append&& append) {
  DeviceBytes staging(size_t(kChunk) * dim * 2);
  cuda::DeviceBuffer<int32_t> pos(std::vector<int32_t>{0});
  for (size_t b = 0; b < pb.seqlens.size(); ++b)
    for (int s = 0; s < pb.seqlens[b]; s += kChunk) {
      const int n = std::min(kChunk, pb.seqlens[b] - s);
      fill_bf16(staging.ptr, size_t(n) * dim, static_cast<uint32_t>(1000003u * b + s / kChunk + 7));
      cuda::check(cudaMemcpy(pos.ptr, &s, sizeof s, cudaMemcpyHostToDevice), "positions upload");
      append(staging.as<uint16_t>(), pos.ptr, static_cast<int>(b), n);
    }
  cuda::check(cudaDeviceSynchronize(), "cache fill");
}

}  // namespace

std::string run_kv_bench(const Options& o, const std::string& kv) {
  if (kv != "fp8" && kv != "fp4" && kv != "codebook")
    throw InputError("mla-bench --kv: '" + kv + "' (expected fp8, fp4 or codebook)");
  if (o.variant != 0) throw InputError("mla-bench --kv " + kv + ": --variant applies to the BF16 mode only");
  nlohmann::json j;
  const cudaDeviceProp prop = describe_device(j);
  L2FlushTimer timer(static_cast<size_t>(prop.l2CacheSize));
  if (o.ceilings) report_ceilings(j, timer, prop.multiProcessorCount);

  const int dim = o.d_c + o.d_r;
  const PagedProblem pb = make_paged_problem(o);
  const int num_pages = static_cast<int>(pb.total_pages);
  const size_t rows = size_t(o.s_q) * o.heads;
  const cuda::DeviceBuffer<int32_t> d_table(pb.table), d_seq(pb.seqlens);
  DeviceBytes q(size_t(o.batch) * rows * dim * 2), out(size_t(o.batch) * rows * o.d_c * 2),
      lse(size_t(o.batch) * rows * 4);
  fill_bf16(q.ptr, size_t(o.batch) * rows * dim, 8);

  // ---- the caches: BF16 and the format's pages, written from the same rows ----
  DeviceBytes bf16_cache(size_t(num_pages) * o.page * dim * 2);
  const quant::Fp8CacheLayout fp8_layout{o.page, o.d_c, o.d_r};
  const kernels::Kv4Format kv4_format = kv == "codebook" ? kernels::Kv4Format::Codebook : kernels::Kv4Format::Fp4;
  const size_t token_bytes =
      kv == "fp8" ? fp8_layout.bytes_per_token() : kernels::kv4_bytes_per_token(kv4_format, o.d_c, o.d_r);
  DeviceBytes cache(size_t(num_pages) * o.page * token_bytes);
  float levels[16] = {};
  if (kv == "codebook") {
    // The 16-level Lloyd-Max table of N(0, 1) in RMS units: what a Gaussian latent calibrates to.
    const quant::Codebook cb = quant::lloyd_max_gaussian(1.0);
    for (int i = 0; i < 16; ++i) levels[i] = static_cast<float>(cb.levels[i]);
  }
  std::printf("filling the caches: %lld tokens, bf16 %.2f GB and %s %.2f GB (%zu B/token)\n", pb.total_tokens,
              double(bf16_cache.bytes()) / 1e9, kv.c_str(), double(cache.bytes()) / 1e9, token_bytes);
  fill_caches(pb, dim, [&](const uint16_t* rows_bf16, const int32_t* pos, int b, int n) {
    const int32_t* table_row = d_table.ptr + size_t(b) * pb.max_pages;
    kernels::CacheAppendParams a;
    a.kv_new = rows_bf16;
    a.positions = pos;
    a.page_table = table_row;
    a.kv_cache = bf16_cache.as<uint16_t>();
    a.batch = 1;
    a.n_new = n;
    a.dim = dim;
    a.max_pages = pb.max_pages;
    a.num_pages = num_pages;
    a.page_size = o.page;
    kernels::cache_append_bf16(a, nullptr);
    // The format's append block (the type of `tag`) for this chunk.
    const auto append = [&](auto tag) {
      return capi::append_params<decltype(tag)>(rows_bf16, pos, table_row, cache.ptr, 1, n, o.d_c, o.d_r, pb.max_pages,
                                                num_pages, o.page);
    };
    if (kv == "fp8") {
      kernels::fp8_cache_append(append(kernels::Fp8AppendParams{}), nullptr);
    } else {
      auto k = append(kernels::Kv4AppendParams{});
      k.format = kv4_format;
      k.c = kFp4C;
      std::copy(levels, levels + 16, k.levels);
      kernels::kv4_cache_append(k, nullptr);
    }
  });

  // ---- the routes ----
  // Shape, paging, lengths and outputs of a decode call (capi::decode_params: the C entry points'
  // blocks); the query and cache pointers are the route's.
  const auto shaped = [&](auto tag) {
    return capi::decode_params<decltype(tag)>(d_table.ptr, d_seq.ptr, out.ptr, lse.as<float>(), o.batch, o.s_q, o.heads,
                                              o.d_c, o.d_r, num_pages, o.page, pb.max_pages, 1.f / std::sqrt(192.f));
  };
  kernels::Bf16DecodeParams p = shaped(kernels::Bf16DecodeParams{});
  p.q = q.as<uint16_t>();
  p.kv_cache = bf16_cache.as<uint16_t>();
  p.num_parts = kernels::decode_parts_for_device(p);
  DeviceBytes ws_bf16(kernels::decode_workspace_bytes_for(p));
  p.workspace = ws_bf16.ptr;
  p.workspace_bytes = ws_bf16.bytes();

  std::vector<Route> routes;
  routes.push_back({"bf16", size_t(dim) * 2, true, [&] { kernels::mla_decode_bf16(p, nullptr); }});

  // The FP8 decode's parameters (FP8 pages, or FP4 pages on the FP8 route); workspace on first use.
  quant::Fp8DecodeParams f = shaped(quant::Fp8DecodeParams{});
  f.cache = cache.as<uint8_t>();
  DeviceBytes ws_fp8;
  const auto fp8_ready = [&] {
    if (ws_fp8.ptr != nullptr) return;
    f.num_parts = kernels::fp8_decode_parts_for_device(f);
    ws_fp8 = DeviceBytes(kernels::fp8_decode_workspace_bytes(f, true));
    f.workspace = ws_fp8.ptr;
    f.workspace_bytes = ws_fp8.bytes();
  };
  // The same decode with the step's schedule planned once, outside the timing
  // (kernels::fp8_decode_plan, FlashMLA's get_mla_metadata: how a serving step runs its layers and
  // how the peer scripts time FlashMLA and ours): a decode of <= 32 query rows is then one launch.
  quant::Fp8DecodeParams fp;
  DeviceBytes ws_plan;
  const auto plan_ready = [&] {
    if (ws_plan.ptr != nullptr) return;
    fp8_ready();
    fp = f;
    ws_plan = DeviceBytes(f.workspace_bytes);
    fp.workspace = ws_plan.ptr;
    kernels::fp8_decode_plan(fp, nullptr);
    fp.planned = true;
  };
  // The 4-bit decode's parameters (BF16 tensor cores).
  kernels::Kv4DecodeParams k;
  k.base = p;
  k.base.kv_cache = cache.as<uint16_t>();
  k.format = kv4_format;
  std::copy(levels, levels + 16, k.levels);
  DeviceBytes ws_kv4;
  const auto kv4_ready = [&] {
    if (ws_kv4.ptr != nullptr) return;
    k.base.num_parts = kernels::kv4_decode_parts_for_device(k);
    ws_kv4 = DeviceBytes(kernels::kv4_decode_workspace_bytes_for(k));
    k.base.workspace = ws_kv4.ptr;
    k.base.workspace_bytes = ws_kv4.bytes();
  };

  if (kv == "fp8") {
    routes.push_back({"fp8", token_bytes, false, [&] {
                        fp8_ready();
                        kernels::fp8_decode_bf16q(f, q.as<uint16_t>(), nullptr);
                      }});
    routes.push_back({"fp8 (planned)", token_bytes, false, [&] {
                        plan_ready();
                        kernels::fp8_decode_bf16q(fp, q.as<uint16_t>(), nullptr);
                      }});
  } else {
    routes.push_back({kv + " (bf16 tensor cores)", token_bytes, true, [&] {
                        kv4_ready();
                        kernels::mla_decode_kv4(k, nullptr);
                      }});
    if (kv == "fp4") {
      routes.push_back({"fp4 (fp8 tensor cores)", token_bytes, false, [&] {
                          fp8_ready();
                          kernels::fp8_decode_fp4_cache_bf16q(f, q.as<uint16_t>(), nullptr);
                        }});
      routes.push_back({"fp4 (fp8 t.c., planned)", token_bytes, false, [&] {
                          plan_ready();
                          kernels::fp8_decode_fp4_cache_bf16q(fp, q.as<uint16_t>(), nullptr);
                        }});
    }
  }

  j["shape"] = {{"batch", o.batch}, {"heads", o.heads}, {"d_c", o.d_c}, {"d_r", o.d_r}, {"seqlen", o.seqlen},
                {"page", o.page}, {"s_q", o.s_q}, {"varied", o.varied}, {"sequential_pages", o.sequential_pages}};
  j["kv"] = kv;
  std::printf("decode B=%d H=%d s_q=%d d_c=%d d_r=%d L=%d%s page=%d, same tokens and page table in every route:\n",
              o.batch, o.heads, o.s_q, o.d_c, o.d_r, o.seqlen, o.varied ? " (varied)" : "", o.page);
  const double q_out_bytes = double(o.batch) * rows * (dim * 2 + o.d_c * 2 + 4);
  const double flops = 2.0 * double(pb.total_tokens) * rows * (dim + o.d_c);
  double bf16_us = 0;
  for (const Route& r : routes) {
    double us = 0;
    try {
      r.run();  // allocates the route's workspace; a shape the route lacks is refused here
      cuda::check(cudaDeviceSynchronize(), r.name + " decode");
      us = timer.median_us(r.run, o.runs, o.warmup);
      cuda::check(cudaDeviceSynchronize(), r.name + " decode");
    } catch (const InputError& e) {
      std::printf("  %-26s not timed: %s\n", r.name.c_str(), e.what());
      j["routes"][r.name] = {{"refused", e.what()}};
      continue;
    }
    if (r.name == "bf16") bf16_us = us;
    const double bytes = double(pb.total_tokens) * double(r.bytes_per_token) + q_out_bytes;
    nlohmann::json rj = {{"us", us}, {"bytes_per_token", r.bytes_per_token}, {"bytes", bytes},
                         {"gbs", bytes / (us * 1e-6) / 1e9}, {"tflops", flops / (us * 1e-6) / 1e12},
                         {"vs_bf16", bf16_us > 0 ? bf16_us / us : 0.0}};
    std::printf("  %-26s %9.1f us  %3zu B/token  %5.0f GB/s  %6.1f TFLOP/s  %.2fx the bf16 decode", r.name.c_str(), us,
                r.bytes_per_token, rj["gbs"].get<double>(), rj["tflops"].get<double>(), rj["vs_bf16"].get<double>());
    if (o.ceilings) {
      // The floor: the route's bytes at the copy rate or its FLOPs at its tensor cores' GEMM rate
      // (the FP8 routes' RoPE part runs on BF16 tensor cores: 64 of 576 dims of S, counted at the FP8 rate).
      const double mem_us = bytes / (j["copy_gbs"].get<double>() * 1e9) * 1e6;
      const double rate = j[r.bf16_math ? "gemm_tflops" : "fp8_gemm_tflops"].get<double>();
      const double math_us = flops / (rate * 1e12) * 1e6;
      rj["floor_us"] = std::max(mem_us, math_us);
      rj["floor_bound"] = mem_us >= math_us ? "memory" : "math";
      rj["frac_floor"] = rj["floor_us"].get<double>() / us;
      std::printf(" | floor %.1f us (%s), %.0f%% of it", rj["floor_us"].get<double>(),
                  rj["floor_bound"].get<std::string>().c_str(), 100 * rj["frac_floor"].get<double>());
    }
    std::printf("\n");
    j["routes"][r.name] = rj;
  }
  return j.dump(2);
}

}  // namespace mla::bench
