// FP8 E4M3 128x128 block (de)quantisation: a hand-computed block, partial edge blocks, the
// round-trip error bound, and the fast encoder against the scalar oracle in core/dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.hpp"
#include "core/fp8_block.hpp"

using namespace mla;

namespace {

OwnedTensor f32_tensor(Shape shape, const std::vector<float>& v) {
  OwnedTensor t{"s", DType::F32, std::move(shape), std::vector<std::byte>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  return t;
}
OwnedTensor e4m3_tensor(Shape shape, const std::vector<uint8_t>& codes) {
  OwnedTensor t{"w", DType::F8_E4M3, std::move(shape), std::vector<std::byte>(codes.size())};
  std::memcpy(t.bytes.data(), codes.data(), codes.size());
  return t;
}
float scale_at(const Fp8Block& b, int64_t bi, int64_t bj) {
  float s;
  std::memcpy(&s, b.scale_inv.bytes.data() + (bi * b.scale_inv.shape[1] + bj) * 4, 4);
  return s;
}

}  // namespace

TEST(Fp8Block, HandComputedBlock) {
  // E4M3 (bias 7): 0x38 = 1.0, 0x40 = 2.0, 0x3C = 1.5, 0xB8 = -1.0, 0x01 = 2^-9, 0x7E = 448.
  const auto w = e4m3_tensor({2, 3}, {0x38, 0x40, 0x3C, 0xB8, 0x01, 0x7E});
  const auto s = f32_tensor({1, 1}, {0.5f});
  const MatrixR m = dequantize_fp8_block(w.view(), s.view(), "w");
  EXPECT_EQ(m(0, 0), 0.5);
  EXPECT_EQ(m(0, 1), 1.0);
  EXPECT_EQ(m(0, 2), 0.75);
  EXPECT_EQ(m(1, 0), -0.5);
  EXPECT_EQ(m(1, 1), std::ldexp(1.0, -10));
  EXPECT_EQ(m(1, 2), 224.0);
}

TEST(Fp8Block, PartialEdgeBlocks) {
  // 200 x 130: blocks of 128x128, 128x2, 72x128, 72x2, each with its own scale.
  const int64_t r = 200, c = 130;
  const auto w = e4m3_tensor({r, c}, std::vector<uint8_t>(r * c, 0x38));  // all 1.0
  const auto s = f32_tensor({2, 2}, {1.0f, 2.0f, 4.0f, 8.0f});
  const MatrixR m = dequantize_fp8_block(w.view(), s.view(), "w");
  EXPECT_EQ(m(0, 0), 1.0);
  EXPECT_EQ(m(127, 127), 1.0);
  EXPECT_EQ(m(127, 128), 2.0);
  EXPECT_EQ(m(0, 129), 2.0);
  EXPECT_EQ(m(128, 0), 4.0);
  EXPECT_EQ(m(199, 127), 4.0);
  EXPECT_EQ(m(128, 128), 8.0);
  EXPECT_EQ(m(199, 129), 8.0);
}

TEST(Fp8Block, WrongScaleShapeIsNamed) {
  const auto w = e4m3_tensor({576, 256}, std::vector<uint8_t>(576 * 256, 0x38));
  const auto s = f32_tensor({4, 2}, std::vector<float>(8, 1.0f));  // needs [5, 2]: 576 = 4*128 + 64
  try {
    dequantize_fp8_block(w.view(), s.view(), "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
    FAIL();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kv_a_proj_with_mqa.weight_scale_inv"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[5, 2]"), std::string::npos) << msg;
  }
}

TEST(Fp8Block, RoundTripErrorBound) {
  // 576 x 300 (partial blocks both ways), magnitudes spread over 6 decades across blocks.
  std::mt19937_64 rng(11);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> mag(-4.0, 2.0);
  const int64_t r = 576, c = 300;
  MatrixR w(r, c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) w(i, j) = g(rng) * std::pow(10.0, mag(rng));
  w(3, 5) = 0.0;
  const auto q = quantize_fp8_block("t", w);
  ASSERT_EQ(q.scale_inv.shape, (Shape{5, 3}));
  EXPECT_EQ(q.scale_inv.name, "t_scale_inv");
  const MatrixR back = dequantize_fp8_block(q.weight.view(), q.scale_inv.view(), "t");
  double worst = 0.0;
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const double s = scale_at(q, i / 128, j / 128);
      // E4M3: 3 mantissa bits -> half-ulp relative 2^-4 for normals; subnormal step 2^-9 * s.
      const double bound = std::max(std::fabs(w(i, j)) * 0.0625, s * std::ldexp(1.0, -10));
      const double err = std::fabs(back(i, j) - w(i, j));
      ASSERT_LE(err, bound * (1 + 1e-12)) << "at " << i << "," << j << " w=" << w(i, j);
      worst = std::max(worst, err / bound);
    }
  EXPECT_GT(worst, 0.5);  // the bound is tight: some element uses most of it
  EXPECT_EQ(back(3, 5), 0.0);
}

TEST(Fp8Block, ZeroBlockGetsUnitScale) {
  const auto q = quantize_fp8_block("z", MatrixR::Zero(130, 5));
  EXPECT_EQ(scale_at(q, 0, 0), 1.0f);
  EXPECT_EQ(scale_at(q, 1, 0), 1.0f);
}

TEST(Fp8Block, EncoderMatchesScalarOracle) {
  // One block whose amax is 448 gets scale 1 exactly, so the codes are e4m3(value): check
  // every midpoint between neighbouring codes (ties to even), its neighbours, and a sweep.
  std::vector<double> vals{448.0};
  std::vector<double> grid;
  for (int code = 0; code < 0x7F; ++code) grid.push_back(e4m3_to_float(static_cast<uint8_t>(code)));
  for (size_t k = 0; k + 1 < grid.size(); ++k) {
    const double mid = 0.5 * (grid[k] + grid[k + 1]);
    for (double v : {grid[k], mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e9)}) {
      vals.push_back(v);
      vals.push_back(-v);
    }
  }
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> e(-12.0, 8.7);
  while (vals.size() < 128 * 40) vals.push_back((rng() & 1 ? 1 : -1) * std::exp2(e(rng)));
  const int64_t n = static_cast<int64_t>(vals.size());
  MatrixR w(1, n);
  for (int64_t i = 0; i < n; ++i) w(0, i) = vals[i];
  for (int64_t b = 0; b * 128 < n; ++b) w(0, b * 128) = 448.0;  // every block: scale exactly 1
  const auto q = quantize_fp8_block("t", w);
  const auto* codes = reinterpret_cast<const uint8_t*>(q.weight.bytes.data());
  for (int64_t i = 0; i < n; ++i) {
    uint8_t oracle = 0;
    store_from_double(DType::F8_E4M3, &oracle, 0, w(0, i));
    ASSERT_EQ(codes[i], oracle) << "value " << w(0, i);
  }
}

TEST(Fp8Block, NonFiniteInputIsNamed) {
  MatrixR w = MatrixR::Ones(4, 4);
  w(2, 1) = std::nan("");
  try {
    quantize_fp8_block("layer.w", w);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layer.w"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[2, 1]"), std::string::npos);
  }
}
