// verify-decode --kv fp4 --kv4-route fp8 on the CPU (verify/kv4_backend.hpp): the backend's decode
// is exactly the append twin, quant::fp4_cache_to_fp8 of the pages and the FP8 decode twin with
// the query quantised per row (the contract kernels::fp8_decode_fp4_cache_bf16q keeps on the GPU:
// tests/kernels/test_kv4_gpu.cpp, Kv4Fp8RouteGpu); within kKv4Fp8RouteKernelRelL2 of float64;
// protected layers keep the BF16 cache; the codebook, other formats and shapes without an
// FP8-route kernel are refused with messages naming the problem.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "kv4_problem.hpp"
#include "quant/fp8_cache_format.hpp"
#include "quant/fp8_decode_twin.hpp"
#include "verify/fp8_backend.hpp"
#include "verify/kv4_backend.hpp"

using namespace kv4_test;

namespace {

// Several requests, pages and tiles: a 1-token request, requests ending mid-tile and mid-page.
const Kv4Shape kShapes[] = {
    Kv4Shape{{1, 130, 200}, 8, 128, 32, 64},          // the tiny models' tp = 1 slice
    Kv4Shape{{70, 257}, 16, 512, 64, 64},             // DeepSeek-V3's latent, 16 heads
    Kv4Shape{{300, 5}, 4, 256, 64, 128},              // pages of 128
    Kv4Shape{{129, 64, 3}, 64, 256, 32, 64},          // the most rows the route takes at d_c <= 256
};

// What the fp8 route must compute, from the parts: the converted pages of the append twin's cache,
// the query quantised per row, the FP8 decode twin (default num_parts).
void direct(const Problem& pr, const transform::Kv4LayerParams& L, std::vector<uint16_t>& out, std::vector<float>& lse) {
  const Kv4Shape& s = pr.sh;
  const std::vector<uint8_t> fp8 = converted_fp8_pages(pr, L);
  const int rows = pr.batch * s.heads;
  std::vector<uint8_t> q8(size_t(rows) * s.d_c);
  std::vector<uint16_t> qr(size_t(rows) * s.d_r);
  std::vector<float> qs(rows);
  quant::fp8_quantize_query_twin(pr.q.data(), rows, s.d_c, s.d_r, q8.data(), qr.data(), qs.data());
  out.assign(size_t(rows) * s.d_c, 0);
  lse.assign(rows, 0.f);
  quant::Fp8DecodeParams p = decode_params<quant::Fp8DecodeParams>(pr.cache_shape(), s.heads, s.d_c, s.d_r, pr.scale);
  p.q8 = q8.data();
  p.q_rope = qr.data();
  p.q_scale = qs.data();
  p.cache = fp8.data();
  p.page_table = pr.table.data();
  p.seqlens = pr.seqlens.data();
  p.out = out.data();
  p.lse = lse.data();
  quant::fp8_decode_twin(p);
}

template <typename F>
void expect_refusal(F&& f, const std::string& needle, const std::string& what) {
  try {
    f();
    FAIL() << what << ": accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
  }
}

}  // namespace

TEST(Kv4Fp8Route, EqualsConvertedPagesThroughTheFp8DecodeTwinBitForBit) {
  uint32_t seed = 31;
  for (const Kv4Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    const Problem pr(seed++, s);
    const auto p = params("fp4", 1);
    auto be = make_cpu_kv4_backend(p, Kv4Route::Fp8);
    std::vector<uint16_t> out, o2;
    std::vector<float> lse, l2;
    pr.run(*be, out, lse);
    direct(pr, p.layers[0], o2, l2);
    EXPECT_EQ(out, o2);
    EXPECT_EQ(lse, l2);
  }
}

TEST(Kv4Fp8Route, WithinItsBoundOfFloat64AndCloseToTheBf16Route) {
  uint32_t seed = 41;
  for (const Kv4Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    const Problem pr(seed++, s);
    const auto ref = pr.reference();
    std::vector<uint16_t> o8, o16;
    std::vector<float> l8, l16;
    auto fp8 = make_cpu_kv4_backend(params("fp4", 1), Kv4Route::Fp8);
    auto bf16 = make_cpu_kv4_backend(params("fp4", 1), Kv4Route::Bf16);
    pr.run(*fp8, o8, l8);
    pr.run(*bf16, o16, l16);
    const auto m8 = vs_reference(o8, ref), m16 = vs_reference(o16, ref);
    std::printf("[figure] %s: fp8 route rel_l2 %.4f cos_diff %.2e; bf16 route rel_l2 %.4f\n", shape_name(s).c_str(),
                m8.rel_l2, m8.cos_diff, m16.rel_l2);
    EXPECT_TRUE(m8.nonfinite_match) << m8.summary();
    EXPECT_LE(m8.rel_l2, kKv4Fp8RouteKernelRelL2) << m8.summary();
    EXPECT_LE(m8.cos_diff, kKv4Fp8RouteCosDiff) << m8.summary();
    EXPECT_GT(m8.rel_l2, 1e-3) << "a 4-bit cache cannot be this close (was it quantised?)";
    // The grid's error dominates: the FP8 roundings add little (in quadrature) to the bf16 route's.
    EXPECT_LE(m8.rel_l2, m16.rel_l2 * 1.25) << "bf16 route " << m16.summary();
  }
  // The named bounds as verify-decode applies them.
  EXPECT_EQ(kv_kernel_tolerance("fp4", 8e-3, "fp8"), kKv4Fp8RouteKernelRelL2);
  EXPECT_EQ(kv_cos_tolerance("fp4", 1e-3, "fp8"), kKv4Fp8RouteCosDiff);
  EXPECT_EQ(kv_kernel_tolerance("fp4", 8e-3, "bf16"), kKv4KernelRelL2);
}

TEST(Kv4Fp8Route, ProtectedLayerIsTheBf16CacheBitForBit) {
  const Problem pr(51);
  auto p = params("fp4", 2);
  p.layers[1].protect_bf16 = true;
  auto be = make_cpu_kv4_backend(p, Kv4Route::Fp8);
  auto bf = make_cpu_backend();
  std::vector<uint16_t> o_kv4, o_bf16;
  std::vector<float> l_kv4, l_bf16;
  be->begin_layer(1);
  pr.run(*be, o_kv4, l_kv4);
  pr.run(*bf, o_bf16, l_bf16);
  EXPECT_EQ(o_kv4, o_bf16);
  EXPECT_EQ(l_kv4, l_bf16);
}

TEST(Kv4Fp8Route, NameSaysTheRoute) {
  EXPECT_NE(make_cpu_kv4_backend(params("fp4", 1), Kv4Route::Fp8)->name().find("fp8 route"), std::string::npos);
  EXPECT_NE(make_cpu_kv4_backend(params("fp4", 1))->name().find("bf16 route"), std::string::npos);
  const auto p = params("fp4", 1);
  EXPECT_NE(make_kv_backend("cpu", "fp4", &p, "fp8")->name().find("fp8 route"), std::string::npos);
}

TEST(Kv4Fp8Route, RefusesTheCodebookOtherFormatsAndUnknownRoutes) {
  expect_refusal([] { make_cpu_kv4_backend(params("codebook", 1), Kv4Route::Fp8); }, "codebook cache has no FP8 route",
                 "codebook, fp8 route");
  const auto cb = params("codebook", 1);
  expect_refusal([&] { make_kv_backend("cpu", "codebook", &cb, "fp8"); }, "codebook cache has no FP8 route",
                 "make_kv_backend codebook fp8");
  expect_refusal([] { make_kv_backend("cpu", "fp8", nullptr, "fp8"); }, "is read with --kv fp4 only (got --kv fp8)",
                 "--kv fp8 --kv4-route fp8");
  expect_refusal([] { make_kv_backend("cpu", "bf16", nullptr, "fp8"); }, "is read with --kv fp4 only (got --kv bf16)",
                 "--kv bf16 --kv4-route fp8");
  expect_refusal([] { parse_kv4_route("fp16"); }, "unknown route 'fp16'", "--kv4-route fp16");
}

// Shapes with no FP8-route kernel are refused on the CPU too (the twin would take them), naming
// the shape and why: 128 rows at d_c = 256 (the TPLA-slice kernel reads no FP4), d_c = 64 (a tp = 2
// slice of the tiny models), d_r = 16.
TEST(Kv4Fp8Route, RefusesShapesTheRouteHasNoKernelFor) {
  struct Case {
    Kv4Shape s;
    std::string needle;
  };
  for (const Case& c : {Case{Kv4Shape{{70}, 128, 256, 64, 64}, "128 query rows at d_c = 256"},
                        Case{Kv4Shape{{70}, 65, 128, 32, 64}, "65 query rows at d_c = 128"},
                        Case{Kv4Shape{{70}, 8, 64, 32, 64}, "d_c must be 128, 256 or 512"},
                        Case{Kv4Shape{{70}, 8, 128, 16, 64}, "d_r must be 32 or 64"}}) {
    const Problem pr(61, c.s);
    auto be = make_cpu_kv4_backend(params("fp4", 1), Kv4Route::Fp8);
    std::vector<uint16_t> out;
    std::vector<float> lse;
    expect_refusal([&] { pr.run(*be, out, lse); }, c.needle, shape_name(c.s));
    expect_refusal([&] { pr.run(*be, out, lse); }, "heads = " + std::to_string(c.s.heads) + ", d_c = " +
                   std::to_string(c.s.d_c), shape_name(c.s) + " (the message names the shape)");
  }
  // 128 heads at d_c = 512 is taken (the 64-row kernel, two row blocks).
  const Problem pr(62, Kv4Shape{{70}, 128, 512, 64, 64});
  auto be = make_cpu_kv4_backend(params("fp4", 1), Kv4Route::Fp8);
  std::vector<uint16_t> out;
  std::vector<float> lse;
  EXPECT_NO_THROW(pr.run(*be, out, lse));
}
