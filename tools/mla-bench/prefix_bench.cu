// mla-bench --prefix: shared-prefix decode timing (see prefix_bench.hpp). Same conditions as the
// decode benchmark: L2 flushed (memset over 2x L2) before every timed call, CUDA events around
// the call only, median of runs after warm-up.
//
// The cache is laid out as a serving engine with prefix caching would hold it: the prefix's
// whole pages are shared by every request; the absorb-only view of request b is those shared
// pages followed by private pages (the prefix's partial last page copied, then b's own tokens);
// the mixed step reads b's own tokens from their own pages and the prefix from its decompressed
// K/V. Own pages are a random permutation of the pool.
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
#include "bench_device.hpp"
#include "prefix_bench.hpp"

namespace mla::bench {
namespace {

// This file is C++17 (CUDA_STANDARD 17), core/dtype.hpp is C++20.
float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

constexpr int kDc = 512, kDr = 64, kDn = 128, kDv = 128;

// One (H, L_s) prefix: latent rows in shared pages, kv_b_proj, the decompressed K/V.
struct Prefix {
  int heads, len, page, pages;
  DeviceBytes latent, kv_b, k, v;
  std::vector<int32_t> table;
  cuda::DeviceBuffer<int32_t> d_table;
  double decompress_us = 0;
  Prefix(int H, int L, int page_size, L2FlushTimer& timer)
      : heads(H), len(L), page(page_size), pages((L + page_size - 1) / page_size),
        latent(size_t(pages) * page_size * (kDc + kDr) * 2), kv_b(size_t(H) * (kDn + kDv) * kDc * 2),
        k(size_t(L) * H * (kDn + kDr) * 2), v(size_t(L) * H * kDv * 2), table(pages), d_table(pages) {
    fill_bf16(latent.ptr, size_t(pages) * page * (kDc + kDr), 11);
    fill_bf16(kv_b.ptr, size_t(H) * (kDn + kDv) * kDc, 12, std::sqrt(3.f / kDc));
    std::iota(table.begin(), table.end(), 0);
    d_table.upload(table);
    quant::PrefixDecompressParams p;
    p.kv_cache = latent.as<uint16_t>();
    p.page_table = d_table.ptr;
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
Timing time_batch(const Prefix& pre, int B, const PrefixOptions& o, L2FlushTimer& timer, bool parts) {
  const int H = pre.heads, page = pre.page, dim = kDc + kDr;
  const int shared_pages = pre.len / page;                       // whole prefix pages, shared
  const int private_tokens = pre.len - shared_pages * page + o.suffix;  // prefix tail copy + own tokens
  const int private_pages = (private_tokens + page - 1) / page;
  const int own_pages = (o.suffix + page - 1) / page;
  // Pool: [prefix pages (the Prefix's own buffer is separate) | own pages | private pages].
  const long long pool_pages = static_cast<long long>(pre.pages) + static_cast<long long>(B) * (own_pages + private_pages);
  DeviceBytes pool(size_t(pool_pages) * page * dim * 2);
  fill_bf16(pool.ptr, size_t(pool_pages) * page * dim, 21);
  cuda::check(cudaMemcpy(pool.ptr, pre.latent.ptr, size_t(pre.pages) * page * dim * 2, cudaMemcpyDeviceToDevice),
              "copy prefix");
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
  const cuda::DeviceBuffer<int32_t> d_own_table(own_table), d_full_table(full_table), d_own_len(own_len),
      d_full_len(full_len);
  const size_t rows = size_t(B) * o.s_q;
  DeviceBytes q_abs(rows * H * dim * 2), q_naive(rows * H * (kDn + kDr) * 2), o_lat(rows * H * kDc * 2),
      lse_lat(rows * H * 4), out(rows * H * kDv * 2), lse(rows * H * 4);
  fill_bf16(q_abs.ptr, rows * H * dim, 31, 0.05f);
  fill_bf16(q_naive.ptr, rows * H * (kDn + kDr), 32);

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
  p.suffix.page_table = d_own_table.ptr;
  p.suffix.seqlens = d_own_len.ptr;
  p.suffix.max_pages = own_pages;
  p.full.page_table = d_full_table.ptr;
  p.full.seqlens = d_full_len.ptr;
  p.full.max_pages = full_max;
  DeviceBytes ws_suffix(kernels::decode_workspace_bytes_for(p.suffix));
  DeviceBytes ws_full(kernels::decode_workspace_bytes_for(p.full));
  p.suffix.workspace = ws_suffix.ptr;
  p.suffix.workspace_bytes = ws_suffix.bytes();
  p.full.workspace = ws_full.ptr;
  p.full.workspace_bytes = ws_full.bytes();
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
  DeviceBytes ws_prefix(kernels::mixed_prefix_workspace_bytes(p));
  p.prefix_workspace = ws_prefix.ptr;
  p.prefix_workspace_bytes = ws_prefix.bytes();

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
  cuda::check(cudaDeviceSynchronize(), "mixed decode");
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
    cuda::check(cudaDeviceSynchronize(), "parts");
    std::vector<uint16_t> host(rows * H * kDv);
    cuda::check(cudaMemset(out.ptr, 0xFF, out.bytes()), "poison");
    kernels::mixed_decode_bf16(p, nullptr);
    cuda::check(cudaMemcpy(host.data(), out.ptr, host.size() * 2, cudaMemcpyDeviceToHost), "download");
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
  cuda::check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, dev), "device properties");
  L2FlushTimer timer(static_cast<size_t>(prop.l2CacheSize));
  const Ceilings c = measure_ceilings(timer, prop.multiProcessorCount, 15);
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
