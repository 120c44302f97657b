// FP4 formats: scale rules on hand-worked values, bit layout, round trip, error helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/fp4_kv.hpp"

using namespace mla::quant;

TEST(Fp4Scale, RulesOnHandWorkedValues) {
  // m = 6: OCP floor(log2 6) - 2 = 0; RCEIL ceil(log2 1) = 0; round(log2(0.156*6=0.936)) = 0.
  EXPECT_EQ(fp4_scale_byte(6.0f, Fp4ScaleRule::OcpFloor, 0), 127);
  EXPECT_EQ(fp4_scale_byte(6.0f, Fp4ScaleRule::Rceil, 0), 127);
  EXPECT_EQ(fp4_scale_byte(6.0f, Fp4ScaleRule::Round, 0.156f), 127);
  // m = 7: OCP floor(2.807) - 2 = 0 (7 saturates to 6); RCEIL ceil(log2(7/6)) = 1.
  EXPECT_EQ(fp4_scale_byte(7.0f, Fp4ScaleRule::OcpFloor, 0), 127);
  EXPECT_EQ(fp4_scale_byte(7.0f, Fp4ScaleRule::Rceil, 0), 128);
  // m = 1, c = 0.156: log2(0.156) = -2.68 -> -3; c = 0.18: log2 = -2.47 -> -2.
  EXPECT_EQ(fp4_scale_byte(1.0f, Fp4ScaleRule::Round, 0.156f), 124);
  EXPECT_EQ(fp4_scale_byte(1.0f, Fp4ScaleRule::Round, 0.18f), 125);
  // Zero group -> byte 0.
  EXPECT_EQ(fp4_scale_byte(0.0f, Fp4ScaleRule::Round, 0.156f), 0);
}

TEST(Fp4Scale, RoundRuleAgreesWithLog2Away) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(1e-3f, 1e3f);
  for (int i = 0; i < 10000; ++i) {
    const float m = u(rng);
    const double l = std::log2(static_cast<double>(0.156f * m));
    if (std::fabs(l - std::floor(l) - 0.5) < 1e-6) continue;  // skip near-ties
    EXPECT_EQ(fp4_scale_byte(m, Fp4ScaleRule::Round, 0.156f), static_cast<int>(std::lround(l)) + 127);
  }
}

TEST(Fp4Mx, PackingAndRoundTripOfRepresentableValues) {
  // Values already on the grid under scale 2^0 (m = 6 -> E = 0 for OCP) decode exactly.
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * grid[i % 8];
  x[7] = 6.0f;
  std::vector<uint8_t> codes(16), scales(1);
  encode_fp4_mx(x.data(), 32, Fp4ScaleRule::OcpFloor, 0, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 127);
  // Element 1 = -0.5 -> code 0b1001 in the high nibble of byte 0; element 0 = +0 -> 0.
  EXPECT_EQ(codes[0], 0x90);
  std::vector<float> y(32);
  decode_fp4_mx(codes.data(), scales.data(), 32, y.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;
  EXPECT_EQ(fp4_mx_sq_error(x.data(), 32, Fp4ScaleRule::OcpFloor, 0), 0.0);
}

TEST(Fp4Mx, SqErrorHelperEqualsEncodeDecode) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd;
  std::vector<float> x(32 * 64);
  for (auto& v : x) v = nd(rng) * 0.3f;
  for (Fp4ScaleRule r : {Fp4ScaleRule::Round, Fp4ScaleRule::OcpFloor, Fp4ScaleRule::Rceil}) {
    std::vector<uint8_t> codes(x.size() / 2), scales(x.size() / 32);
    encode_fp4_mx(x.data(), x.size(), r, 0.156f, codes.data(), scales.data());
    std::vector<float> y(x.size());
    decode_fp4_mx(codes.data(), scales.data(), x.size(), y.data());
    double e = 0;
    for (std::size_t i = 0; i < x.size(); ++i) e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    EXPECT_NEAR(fp4_mx_sq_error(x.data(), x.size(), r, 0.156f), e, 1e-9 * e) << fp4_rule_name(r);
  }
  std::vector<uint8_t> codes(x.size() / 2), scales(x.size() / 16);
  encode_nvfp4(x.data(), x.size(), codes.data(), scales.data());
  std::vector<float> y(x.size());
  decode_nvfp4(codes.data(), scales.data(), x.size(), y.data());
  double e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
  EXPECT_NEAR(nvfp4_sq_error(x.data(), x.size()), e, 1e-9 * e);
  // A finer scale (group 16, 3-bit mantissa scale) should not lose to MX group 32 on Gaussians.
  EXPECT_LT(nvfp4_sq_error(x.data(), x.size()), fp4_mx_sq_error(x.data(), x.size(), Fp4ScaleRule::OcpFloor, 0));
}

TEST(Fp4Mx, RejectsPartialGroup) {
  std::vector<float> x(31);
  std::vector<uint8_t> c(16), s(1);
  EXPECT_THROW(encode_fp4_mx(x.data(), 31, Fp4ScaleRule::Round, 0.156f, c.data(), s.data()), mla::InputError);
}

TEST(Fp4Mx, FastRoundingEqualsEncoderOnEveryTieAndRandomValues) {
  // Groups whose absmax is 6 (E = 0 under OCP floor) make the error helper round v itself.
  std::vector<float> vals = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.2499f, 0.7501f, 5.01f};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  while (vals.size() % 31 != 0 || vals.size() < 31 * 40) vals.push_back(u(rng));
  std::vector<float> x;
  for (std::size_t i = 0; i < vals.size(); i += 31) {
    x.push_back(6.0f);
    x.insert(x.end(), vals.begin() + i, vals.begin() + i + 31);
  }
  std::vector<uint8_t> codes(x.size() / 2), scales(x.size() / 32);
  encode_fp4_mx(x.data(), x.size(), Fp4ScaleRule::OcpFloor, 0, codes.data(), scales.data());
  std::vector<float> y(x.size());
  decode_fp4_mx(codes.data(), scales.data(), x.size(), y.data());
  double e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
  EXPECT_DOUBLE_EQ(fp4_mx_sq_error(x.data(), x.size(), Fp4ScaleRule::OcpFloor, 0), e);
  EXPECT_GT(e, 0.0);
}
