// RoPE / YaRN: hand-computed inverse frequencies, the relative-position property, the pair
// layouts, and the equivalence with transformers' de-interleave + rotate_half (docs/math.md).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.hpp"
#include "model/attention_reference.hpp"
#include "model/rope.hpp"
#include "model/test_fixtures.hpp"

namespace mla::model {
namespace {

constexpr double kFreqTol = 1e-15;     // relative, closed-form frequencies
constexpr double kRotationTol = 1e-12; // dot products of rotated unit-scale vectors

std::vector<double> random_vec(int64_t n, uint64_t seed) {
  const MatrixR m = random_matrix(1, n, seed);
  return {m.data(), m.data() + n};
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

YarnScaling deepseek_v3_yarn() {
  YarnScaling y;
  y.factor = 40.0;
  y.mscale = 1.0;
  y.mscale_all_dim = 1.0;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = 32.0;
  y.beta_slow = 1.0;
  return y;
}

TEST(Rope, PlainInvFreq) {
  const Rope rope(8, 10000.0, std::nullopt, RopeLayout::kInterleavedPairs);
  const std::vector<double> expect{1.0, 0.1, 0.01, 0.001};  // 10000^(-2i/8)
  ASSERT_EQ(rope.inv_freq().size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(rope.inv_freq()[i], expect[i], kFreqTol * expect[i]);
  EXPECT_EQ(rope.attention_factor(), 1.0);
}

// tiny_v3_config: d_r 8, original 64 positions. By hand: correction dims
// 8 ln(64/(32*2pi)) / (2 ln 1e4) = -0.497 -> floor -1 -> clamp 0, and
// 8 ln(64/(2pi)) / (2 ln 1e4) = 1.008 -> ceil 2; ramp (i - 0)/2 = 0, 0.5, 1, 1.
TEST(Rope, YarnInvFreqTinyHandComputed) {
  const Rope rope(test_config_v3_style());
  const std::vector<double> expect{1.0, 0.1 * 0.5 + 0.1 / 40 * 0.5, 0.01 / 40, 0.001 / 40};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(rope.inv_freq()[i], expect[i], kFreqTol * expect[i]);
  EXPECT_EQ(rope.attention_factor(), 1.0);  // mscale == mscale_all_dim
}

// DeepSeek-V3 itself: d_r 64, original 4096. Correction dims 10.47 -> 10 and 22.51 -> 23
// (worked out by hand), ramp (i - 10) / 13.
TEST(Rope, YarnInvFreqDeepSeekV3HandComputed) {
  const Rope rope(64, 10000.0, deepseek_v3_yarn(), RopeLayout::kInterleavedPairs);
  ASSERT_EQ(rope.inv_freq().size(), 32u);
  auto base = [](int i) { return std::pow(10000.0, -2.0 * i / 64.0); };
  EXPECT_NEAR(rope.inv_freq()[0], 1.0, kFreqTol);
  EXPECT_NEAR(rope.inv_freq()[10], base(10), kFreqTol * base(10));  // last extrapolated
  const double r16 = 6.0 / 13.0;
  EXPECT_NEAR(rope.inv_freq()[16], 0.01 / 40 * r16 + 0.01 * (1 - r16), kFreqTol * 0.01);
  EXPECT_NEAR(rope.inv_freq()[23], base(23) / 40, kFreqTol * base(23));  // first interpolated
  EXPECT_NEAR(rope.inv_freq()[31], base(31) / 40, kFreqTol * base(31));
}

TEST(Rope, AttentionFactorWithoutMscaleAllDim) {
  YarnScaling y = deepseek_v3_yarn();
  y.mscale = 0.707;
  y.mscale_all_dim = 0.0;  // not set: transformers falls back to get_mscale(factor)
  const Rope rope(64, 10000.0, y, RopeLayout::kInterleavedPairs);
  EXPECT_NEAR(rope.attention_factor(), 0.1 * std::log(40.0) + 1.0, 1e-15);
  y.mscale_all_dim = 1.0;
  const Rope ratio(64, 10000.0, y, RopeLayout::kInterleavedPairs);
  EXPECT_NEAR(ratio.attention_factor(), (0.0707 * std::log(40.0) + 1) / (0.1 * std::log(40.0) + 1),
              1e-15);
}

TEST(Rope, PairLayouts) {
  for (RopeLayout layout : {RopeLayout::kInterleavedPairs, RopeLayout::kHalfSplit}) {
    const Rope rope(8, 10000.0, std::nullopt, layout);
    std::vector<double> v(8, 0.0);
    v[0] = 1.0;
    rope.apply(v.data(), 3);  // pair 0 has inv_freq 1: angle 3
    const size_t partner = layout == RopeLayout::kInterleavedPairs ? 1 : 4;
    EXPECT_NEAR(v[0], std::cos(3.0), 1e-15);
    EXPECT_NEAR(v[partner], std::sin(3.0), 1e-15);
    for (size_t i = 0; i < 8; ++i) {
      if (i != 0 && i != partner) {
        EXPECT_EQ(v[i], 0.0) << "component " << i;
      }
    }
  }
}

// q.k after RoPE depends only on the distance between positions, for every layout and YaRN.
TEST(Rope, RelativePositionProperty) {
  const std::vector<Rope> ropes{
      Rope(16, 10000.0, std::nullopt, RopeLayout::kInterleavedPairs),
      Rope(16, 10000.0, std::nullopt, RopeLayout::kHalfSplit),
      Rope(64, 10000.0, deepseek_v3_yarn(), RopeLayout::kInterleavedPairs)};
  for (const Rope& rope : ropes) {
    const auto q = random_vec(rope.dim(), 11), k = random_vec(rope.dim(), 12);
    auto rotated_dot = [&](int64_t pq, int64_t pk) {
      auto a = q, b = k;
      rope.apply(a.data(), pq);
      rope.apply(b.data(), pk);
      return dot(a, b);
    };
    const double near = rotated_dot(10, 3), far = rotated_dot(5007, 5000);
    EXPECT_NEAR(near, far, kRotationTol * std::abs(near));
    // and it does depend on the distance (the test could fail):
    EXPECT_GT(std::abs(rotated_dot(10, 3) - rotated_dot(10, 4)), 1e-3);
    // a rotation keeps the norm (attention factor 1 here)
    auto a = q;
    rope.apply(a.data(), 777);
    EXPECT_NEAR(dot(a, a), dot(q, q), kRotationTol * dot(q, q));
  }
}

// transformers DeepseekV3 with rope_interleave: de-interleave (evens then odds), then
// x*cos + rotate_half(x)*sin with cos = cat(cos(f), cos(f)). Written here from the formula;
// its output is our output permuted by the de-interleave, so every dot product agrees.
TEST(Rope, MatchesDeinterleaveRotateHalf) {
  const int64_t d = 16;
  const Rope rope(d, 10000.0, std::nullopt, RopeLayout::kInterleavedPairs);
  const auto v = random_vec(d, 21);
  const int64_t pos = 37;
  std::vector<double> perm(d), hf(d);
  for (int64_t i = 0; i < d / 2; ++i) {
    perm[i] = v[2 * i];
    perm[i + d / 2] = v[2 * i + 1];
  }
  for (int64_t j = 0; j < d; ++j) {
    const double f = pos * rope.inv_freq()[j % (d / 2)];
    const double rot_half = j < d / 2 ? -perm[j + d / 2] : perm[j - d / 2];
    hf[j] = perm[j] * std::cos(f) + rot_half * std::sin(f);
  }
  auto ours = v;
  rope.apply(ours.data(), pos);
  for (int64_t i = 0; i < d / 2; ++i) {
    EXPECT_NEAR(hf[i], ours[2 * i], 1e-14);
    EXPECT_NEAR(hf[i + d / 2], ours[2 * i + 1], 1e-14);
  }
}

TEST(Rope, RejectsOddDim) {
  EXPECT_THROW(Rope(7, 10000.0, std::nullopt, RopeLayout::kHalfSplit), InputError);
}

}  // namespace
}  // namespace mla::model
