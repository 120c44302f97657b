// GPU tests of the shared-prefix kernels (label gpu; skipped without a device): decompress,
// prefix attention and the mixed step against their CPU twins and the float64 reference, on
// paged layouts with the prefix ending mid-page, several row blocks, MTP and the fallback.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "common/gpu.hpp"
#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/mla_decode.hpp"
#include "kernels/prefix_attention.hpp"
#include "model/metrics.hpp"
#include "prefix_case.hpp"

namespace mla::test {
namespace {

template <class T>
using Dev = cuda::DeviceBuffer<T>;

// The case on the device; the mixed step's parameters point at device buffers.
struct DeviceCase {
  PrefixCase& c;
  Dev<uint16_t> cache, kv_b, q_naive, q_abs, k, v, o_lat, out;
  Dev<int32_t> prefix_table, own_table, full_table, own_len, full_len;
  Dev<float> lse_lat, lse;
  explicit DeviceCase(PrefixCase& pc)
      : c(pc), cache(pc.cache), kv_b(pc.kv_b), q_naive(pc.q_naive), q_abs(pc.q_abs), k(pc.k), v(pc.v),
        o_lat(pc.o_lat), out(pc.out), prefix_table(pc.prefix_table), own_table(pc.own_table),
        full_table(pc.full_table), own_len(pc.own_len), full_len(pc.full_len), lse_lat(pc.lse_lat), lse(pc.lse) {}
  quant::PrefixDecompressParams decompress() {
    auto p = c.decompress_params();
    p.kv_cache = cache.ptr;
    p.page_table = prefix_table.ptr;
    p.kv_b = kv_b.ptr;
    p.k = k.ptr;
    p.v = v.ptr;
    return p;
  }
  quant::MixedDecodeParams mixed(double b_theta, int splits, Dev<char>& ws_suffix, Dev<char>& ws_full,
                                 Dev<char>& ws_prefix) {
    auto p = c.mixed_params(b_theta, splits);
    for (auto* d : {&p.suffix, &p.full}) {
      d->q = q_abs.ptr;
      d->kv_cache = cache.ptr;
      d->out = o_lat.ptr;
      d->lse = lse_lat.ptr;
    }
    p.suffix.page_table = own_table.ptr;
    p.suffix.seqlens = own_len.ptr;
    p.full.page_table = full_table.ptr;
    p.full.seqlens = full_len.ptr;
    p.suffix.workspace = ws_suffix.ptr;
    p.suffix.workspace_bytes = ws_suffix.count;
    p.full.workspace = ws_full.ptr;
    p.full.workspace_bytes = ws_full.count;
    p.q_naive = q_naive.ptr;
    p.prefix_k = k.ptr;
    p.prefix_v = v.ptr;
    p.kv_b = kv_b.ptr;
    p.out = out.ptr;
    p.lse = lse.ptr;
    p.prefix_workspace = ws_prefix.ptr;
    p.prefix_workspace_bytes = ws_prefix.count;
    return p;
  }
};

// GPU vs twin bf16 tensors of the decompress step. Both sum d_c fp32 products, in different
// orders; rounded to bf16 that flips at most one ulp, except where the sum nearly cancels: there
// a difference of a few fp32 ulps of the terms is many ulps of the tiny result (seen on the
// first GPU run: 1-18 elements per case, of 10^4-10^5). So: `far` counts elements more than one
// ulp apart whose difference also exceeds 2^-16 of the tensor's largest |value| (fp32 summation
// error is ~1e-7 of the terms; an indexing or rounding bug moves values by ~their size).
struct BfDiff {
  size_t differ = 0, beyond_one_ulp = 0, far = 0;
  double max_abs = 0;
};
BfDiff bf16_diff(const std::vector<uint16_t>& gpu, const std::vector<uint16_t>& twin) {
  const std::vector<double> a = bf16_to_doubles(gpu), b = bf16_to_doubles(twin);
  double scale = 0;
  for (double x : b) scale = std::max(scale, std::abs(x));
  BfDiff d;
  for (size_t i = 0; i < a.size(); ++i) {
    if (gpu[i] == twin[i]) continue;
    ++d.differ;
    const double diff = std::abs(a[i] - b[i]);
    d.max_abs = std::max(d.max_abs, diff);
    if (std::abs(int(gpu[i]) - int(twin[i])) <= 1) continue;
    ++d.beyond_one_ulp;
    if (!(diff <= scale * 0x1p-16)) ++d.far;
  }
  return d;
}

// Decompress on both sides, then the mixed step (or the fallback) on the GPU vs the twin and
// vs float64.
void run_gpu_case(PrefixCase c, double b_theta, int splits) {
  DeviceCase d(c);
  kernels::prefix_decompress_bf16(d.decompress(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  quant::prefix_decompress_twin_bf16(c.decompress_params());
  const BfDiff kd = bf16_diff(d.k.download(), c.k), vd = bf16_diff(d.v.download(), c.v);
  EXPECT_EQ(kd.far, 0u) << kd.differ << " K elements differ, " << kd.beyond_one_ulp << " by > 1 ulp, max |diff| "
                        << kd.max_abs;
  EXPECT_EQ(vd.far, 0u) << vd.differ << " V elements differ, " << vd.beyond_one_ulp << " by > 1 ulp, max |diff| "
                        << vd.max_abs;
  EXPECT_LT(kd.differ + vd.differ, (c.k.size() + c.v.size()) / 100 + 1);
  std::printf("decompress vs twin: K %zu / %zu differ (%zu by > 1 ulp, max |diff| %.3g), V %zu / %zu (%zu, %.3g)\n",
              kd.differ, c.k.size(), kd.beyond_one_ulp, kd.max_abs, vd.differ, c.v.size(), vd.beyond_one_ulp,
              vd.max_abs);

  // The twin runs on the GPU's K/V so that both attend to the same prefix.
  c.k = d.k.download();
  c.v = d.v.download();
  Dev<char> ws_suffix(kernels::decode_workspace_bytes_for(c.decode_params(false)));
  Dev<char> ws_full(kernels::decode_workspace_bytes_for(c.decode_params(true)));
  quant::MixedDecodeParams probe = c.mixed_params(b_theta, splits);
  Dev<char> ws_prefix(std::max<size_t>(1, kernels::mixed_prefix_workspace_bytes(probe)));
  quant::MixedDecodeParams gp = d.mixed(b_theta, splits, ws_suffix, ws_full, ws_prefix);
  // Poison the outputs and the prefix partials: an unwritten element shows as NaN.
  ASSERT_EQ(cudaMemset(d.out.ptr, 0xFF, d.out.count * sizeof(uint16_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.lse.ptr, 0xFF, d.lse.count * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(ws_prefix.ptr, 0xFF, ws_prefix.count), cudaSuccess);
  const int used_splits = quant::mixed_uses_prefix(gp) ? kernels::mixed_prefix_splits(gp) : 0;
  kernels::mixed_decode_bf16(gp, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> gpu_out = d.out.download();
  const std::vector<float> gpu_lse = d.lse.download();

  quant::mixed_decode_twin_bf16(c.mixed_params(b_theta, used_splits > 0 ? used_splits : splits));
  const auto vs_twin = model::compare(bf16_to_doubles(gpu_out), bf16_to_doubles(c.out));
  SCOPED_TRACE("gpu vs twin: " + vs_twin.summary());
  EXPECT_TRUE(vs_twin.nonfinite_match);
  EXPECT_LT(vs_twin.rel_l2, kPrefixTwinRelL2Tol);
  double lse_twin = 0;
  for (size_t i = 0; i < gpu_lse.size(); ++i) {
    if (std::isinf(c.lse[i])) {
      EXPECT_EQ(gpu_lse[i], c.lse[i]) << "lse[" << i << "]";
      continue;
    }
    lse_twin = std::max(lse_twin, double(std::abs(gpu_lse[i] - c.lse[i])));
  }
  EXPECT_LT(lse_twin, kPrefixTwinLseAbsTol);

  const PrefixReference ref = reference_prefix_decode(c);
  const auto vs_ref = model::compare(bf16_to_doubles(gpu_out), ref.out);
  SCOPED_TRACE("gpu vs float64: " + vs_ref.summary());
  EXPECT_LT(vs_ref.rel_l2, kPrefixRelL2Tol);
  EXPECT_LT(vs_ref.cos_diff, kPrefixCosDiffTol);
  std::printf("%s path, %d prefix splits: gpu vs twin rel_l2 %.3g (lse max |diff| %.3g); gpu vs float64 rel_l2 %.3g, "
              "cos_diff %.3g\n",
              used_splits > 0 ? "mixed" : "absorb-only", used_splits, vs_twin.rel_l2, lse_twin, vs_ref.rel_l2,
              vs_ref.cos_diff);
}

std::vector<int32_t> random_lengths(int n, int lo, int hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = lo + static_cast<int>(rng() % (hi - lo + 1));
  return v;
}

// The (192, 128) head shape runs the wgmma kernel: row blocks with one or two active warpgroups
// (ping-pong only with two), runs of 0, 1, 2 and 9 tiles, MTP.
TEST(PrefixGpu, KimiDimsTwoRowBlocksPrefixMidPage) {
  REQUIRE_GPU();
  // 150 rows: a full and a partial 128-row block (its second warpgroup has no row);
  // 300 = 4 pages of 64 + 44; own 0..20 tokens.
  run_gpu_case(make_prefix_case(300, random_lengths(150, 0, 20, 1), 1, 4, true, 64, 21), 0.0, 3);
}

TEST(PrefixGpu, KimiDimsDefaultSplits) {
  REQUIRE_GPU();
  run_gpu_case(make_prefix_case(1000, random_lengths(20, 1, 40, 2), 1, 8, true, 128, 22), 0.0, 0);
}

TEST(PrefixGpu, KimiDimsMtpLongPrefixThreeRowBlocks) {
  REQUIRE_GPU();
  // s_q = 2: 2 x 140 = 280 rows (3 blocks); 2100 tokens = 33 tiles, the last of 52 tokens, over
  // 4 splits (9 tiles each; the last run 6 tiles); heads 3.
  run_gpu_case(make_prefix_case(2100, random_lengths(140, 2, 30, 5), 2, 3, true, 64, 27), 0.0, 4);
}

TEST(PrefixGpu, KimiDimsEmptyRunsAndOneTokenPrefix) {
  REQUIRE_GPU();
  // 130 tokens = 3 tiles over 7 splits: runs 3..6 hold no key (LSE -inf, weight 0 in the merge).
  run_gpu_case(make_prefix_case(130, random_lengths(33, 0, 9, 6), 1, 2, true, 64, 28), 0.0, 7);
  run_gpu_case(make_prefix_case(1, {0, 5, 1}, 1, 4, true, 64, 29), 0.0, 0);
}

TEST(PrefixGpu, TinyDimsMtp) {
  REQUIRE_GPU();
  run_gpu_case(make_prefix_case(129, random_lengths(70, 1, 70, 3), 2, 8, false, 128, 23), 0.0, 0);
}

TEST(PrefixGpu, PrefixOfOneTokenAndEmptySuffix) {
  REQUIRE_GPU();
  run_gpu_case(make_prefix_case(1, {0, 3, 64, 1}, 1, 8, false, 64, 24), 0.0, 0);
}

TEST(PrefixGpu, FallbackBelowThreshold) {
  REQUIRE_GPU();
  run_gpu_case(make_prefix_case(200, random_lengths(6, 1, 90, 4), 1, 16, true, 64, 25), 7.0, 0);
}

TEST(PrefixGpu, BadParamsThrowBeforeLaunch) {
  REQUIRE_GPU();
  PrefixCase c = make_prefix_case(10, {2}, 1, 2, false, 64, 26);
  DeviceCase d(c);
  auto p = d.decompress();
  p.d_c = 100;
  EXPECT_THROW(kernels::prefix_decompress_bf16(p, nullptr), InputError);
  Dev<char> a(1), b(1), w(1);
  auto m = d.mixed(0.0, 1, a, b, w);
  m.prefix_workspace_bytes = 0;
  EXPECT_THROW(kernels::mixed_decode_bf16(m, nullptr), InputError);
}

}  // namespace
}  // namespace mla::test
