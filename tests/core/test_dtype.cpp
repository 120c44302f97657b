// Scalar dtype codecs: properties that hold by construction of each format, checked
// exhaustively (decode -> encode is the identity on every finite code) plus named edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.hpp"
#include "core/tensor.hpp"

using namespace mla;

TEST(DType, NamesAndBitsRoundTrip) {
  for (auto t : {DType::BOOL, DType::U8, DType::I8, DType::U16, DType::I16, DType::U32, DType::I32, DType::U64,
                 DType::I64, DType::F8_E4M3, DType::F8_E5M2, DType::F8_E8M0, DType::F4, DType::F16, DType::BF16,
                 DType::F32, DType::F64}) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_EQ(parse_dtype("F8_E4M3FN"), std::nullopt);
  EXPECT_EQ(dtype_bits(DType::F4), 4);
  EXPECT_EQ(dtype_bits(DType::BF16), 16);
}

TEST(DType, E4M3DecodeEncodeIsIdentityOnFiniteCodes) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      EXPECT_TRUE((c & 0x7F) == 0x7F) << c;
      continue;
    }
    if (c == 0x80) continue;  // -0 encodes to 0x80 as well, checked below
    EXPECT_EQ(float_to_e4m3(v), c) << "code " << c << " value " << v;
  }
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7E);   // saturates
  EXPECT_EQ(float_to_e4m3(-1e9f), 0xFE);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  // 1 + 1/16 lies halfway between 1 and 1.125: ties to even -> 1.0
  EXPECT_EQ(e4m3_to_float(float_to_e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(e4m3_to_float(float_to_e4m3(1.1875f)), 1.25f);
}

TEST(DType, E2M1GridAndTies) {
  const float grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), grid[c]);
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c | 8)), -grid[c]);
  }
  EXPECT_EQ(e2m1_to_float(float_to_e2m1(2.5f)), 2.0f);   // tie -> even mantissa
  EXPECT_EQ(e2m1_to_float(float_to_e2m1(3.5f)), 4.0f);
  EXPECT_EQ(e2m1_to_float(float_to_e2m1(5.0f)), 4.0f);
  EXPECT_EQ(e2m1_to_float(float_to_e2m1(100.0f)), 6.0f);  // saturates
  EXPECT_EQ(e2m1_to_float(float_to_e2m1(0.25f)), 0.0f);
  EXPECT_EQ(e2m1_to_float(float_to_e2m1(0.26f)), 0.5f);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  for (uint32_t c = 0; c < 65536; c += 3) {
    const float v = bf16_to_float(static_cast<uint16_t>(c));
    if (std::isnan(v)) continue;
    EXPECT_EQ(float_to_bf16(v), c);
    EXPECT_EQ(double_to_bf16(v), c);
  }
}

TEST(DType, DoubleToBf16AvoidsDoubleRounding) {
  // x = 1 + 2^-8 + 2^-30: rounding to float first gives exactly 1 + 2^-8 (a bf16 tie that goes
  // to even = 1.0), but the true nearest bf16 of x is 1 + 2^-7.
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(float_to_bf16(static_cast<float>(x)), 0x3F80);
  EXPECT_EQ(double_to_bf16(x), 0x3F81);
}

TEST(DType, F4PackingLowNibbleFirst) {
  std::vector<double> v{0.5, -6, 1.5, 3};
  OwnedTensor t = from_f64("x", DType::F4, {4}, v);
  ASSERT_EQ(t.bytes.size(), 2u);
  EXPECT_EQ(static_cast<unsigned>(t.bytes[0]), 0xF1u);  // low: 0.5 = 0x1, high: -6 = 0xF
  EXPECT_EQ(to_f64(t.view()), v);
}

TEST(DType, Ue8m0IsPowerOfTwo) {
  EXPECT_EQ(ue8m0_to_float(127), 1.0f);
  EXPECT_EQ(ue8m0_to_float(130), 8.0f);
  EXPECT_TRUE(std::isnan(ue8m0_to_float(255)));
}

TEST(DType, FastDoubleToBf16MatchesScalarOracle) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> ex(-140, 130);
  for (int i = 0; i < 200000; ++i) {
    const double v = std::ldexp(mant(rng), ex(rng));
    ASSERT_EQ(fast_double_to_bf16(v), double_to_bf16(v)) << v;
  }
  // Ties: exactly halfway between two BF16 values round to even.
  const double tie = 1.0 + std::ldexp(1.0, -8);
  EXPECT_EQ(fast_double_to_bf16(tie), double_to_bf16(tie));
}
