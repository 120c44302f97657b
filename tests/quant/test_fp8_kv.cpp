// FP8 KV formats: RoPE-aware per-token encoding bit by bit, and the study configurations.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.hpp"
#include "quant/fp8_kv.hpp"

using namespace mla;
using namespace mla::quant;

TEST(Fp8RopeAware, ScaleAndCodesByHand) {
  // amax = 448 -> s = 1: codes are plain E4M3 of x; k_pe stored as BF16 of k_pe / 1.
  const float x[4] = {448.0f, -1.0f, 0.3f, 0.0f};
  const float kpe[2] = {3.0f, -0.1f};
  uint8_t x8[4];
  uint16_t kb[2];
  const float s = encode_fp8_rope_aware(x, 4, kpe, 2, x8, kb);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(x8[0], 0x7E);  // 448 = 1.75 * 2^8: S=0 E=1111 M=110
  EXPECT_EQ(x8[1], 0xB8);  // -1: S=1 E=0111 M=000
  EXPECT_EQ(x8[3], 0x00);
  EXPECT_EQ(kb[0], float_to_bf16(3.0f));
  float xo[4], ko[2];
  decode_fp8_rope_aware(x8, 4, kb, 2, s, xo, ko);
  EXPECT_EQ(xo[0], 448.0f);
  EXPECT_EQ(xo[1], -1.0f);
  EXPECT_EQ(ko[0], 3.0f);
}

TEST(Fp8RopeAware, KpeIsPreDividedByTheScale) {
  const float x[2] = {8.96f, 1.0f};  // s = 0.02
  const float kpe[1] = {0.5f};
  uint8_t x8[2];
  uint16_t kb[1];
  const float s = encode_fp8_rope_aware(x, 2, kpe, 1, x8, kb);
  EXPECT_FLOAT_EQ(s, 8.96f / 448.0f);
  EXPECT_EQ(kb[0], float_to_bf16(0.5f / s));
  EXPECT_EQ(x8[0], float_to_e4m3(8.96f / s));
}

TEST(Fp8Configs, ErrorsOrderAsExpectedOnOutlierRope) {
  // x ~ N(0,1) with token-varying magnitude; k_pe much larger than x (RoPE outliers).
  std::mt19937_64 rng(1);
  std::normal_distribution<double> nd;
  const int L = 256, dc = 128, dr = 16;
  MatrixR x(L, dc), kpe(L, dr);
  for (int t = 0; t < L; ++t) {
    const double mag = std::exp(3.0 * nd(rng));
    for (int i = 0; i < dc; ++i) x(t, i) = mag * nd(rng);
    for (int i = 0; i < dr; ++i) kpe(t, i) = 50.0 * mag * nd(rng);
  }
  auto err = [&](Fp8Config c) {
    MatrixR xo, ko;
    fake_quant_fp8_cache(c, x, kpe, xo, ko);
    // Mean per-token relative error: every token matters to attention, not only the largest.
    double e = 0;
    for (int t = 0; t < L; ++t) e += (xo.row(t) - x.row(t)).squaredNorm() / x.row(t).squaredNorm();
    return e / L;
  };
  const double ra = err(Fp8Config::RopeAware), a = err(Fp8Config::A), c = err(Fp8Config::C),
               d = err(Fp8Config::D);
  // The RoPE outliers set A's scale, crushing x; per-tensor C ignores token magnitude.
  EXPECT_LT(ra, a);
  EXPECT_LT(ra, c);
  EXPECT_LE(ra, d * 1.0001);
  // k_pe under RoPE-aware: BF16 after division by a power-free scale; relative error ~2^-9.
  MatrixR xo, ko;
  fake_quant_fp8_cache(Fp8Config::RopeAware, x, kpe, xo, ko);
  EXPECT_LT((ko - kpe).norm() / kpe.norm(), 4e-3);
}
