// quant::fp4_cache_to_fp8, the CPU twin of the FP8-tensor-core route's in-kernel conversion: the
// FP8 token's values (x8 * s, k_pe' * s) equal the FP4 token's exactly when its group exponents
// span <= 11 octaves; wider spans round only the small groups (to E4M3 subnormals or zero);
// poisoned tokens stay poisoned; a token of zeros gets the floor exponent (finite scale, RoPE kept).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/fp4_cache_format.hpp"
#include "quant/fp4_to_fp8.hpp"
#include "quant/fp8_cache_format.hpp"

namespace mla::quant {
namespace {

struct Pages {
  Fp4CacheLayout l4;
  Fp8CacheLayout l8;
  std::vector<uint8_t> fp4, fp8;
};

// Random tokens with scale bytes in [lo, hi] in every slot of one page.
Pages make_pages(int d_c, int d_r, int page, int lo, int hi, uint64_t seed) {
  Pages p{Fp4CacheLayout{page, d_c, d_r}, Fp8CacheLayout{page, d_c, d_r}, {}, {}};
  p.fp4.assign(p.l4.page_bytes(), 0);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), sb(lo, hi);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint8_t> codes(p.l4.code_row_bytes()), scales(p.l4.scale_row_bytes());
  std::vector<uint16_t> kpe(d_r);
  for (int t = 0; t < page; ++t) {
    for (auto& v : codes) v = static_cast<uint8_t>(byte(rng));
    for (auto& v : scales) v = static_cast<uint8_t>(sb(rng));
    for (auto& v : kpe) v = float_to_bf16(normal(rng));
    store_fp4_token(p.l4, p.fp4.data(), t, codes.data(), scales.data(), kpe.data());
  }
  p.fp8.assign(p.l8.page_bytes(), 0);
  return p;
}

// Max |FP8 value - FP4 value| over token t's latent (0 when exact), and whether RoPE is exact.
double latent_error(const Pages& p, int t, bool* rope_exact) {
  std::vector<float> x8(p.l8.d_c), k8(p.l8.d_r);
  dequant_fp8_token(p.l8, p.fp8.data(), t, x8.data(), k8.data());
  std::vector<uint16_t> row(p.l4.d_c + p.l4.d_r);
  dequant_fp4_token_bf16(p.l4, p.fp4.data(), t, row.data());
  double err = 0;
  for (int i = 0; i < p.l4.d_c; ++i) err = std::max(err, std::fabs(double(x8[i]) - double(bf16_to_float(row[i]))));
  *rope_exact = true;
  for (int i = 0; i < p.l4.d_r; ++i) *rope_exact = *rope_exact && k8[i] == bf16_to_float(row[p.l4.d_c + i]);
  return err;
}

TEST(Fp4ToFp8, ExactWhenGroupExponentsSpanAtMostElevenOctaves) {
  for (int d_c : {128, 256, 512}) {
    Pages p = make_pages(d_c, 64, 64, 110, 121, 7 + d_c);  // span 11
    fp4_cache_to_fp8(p.l4, p.fp4.data(), 1, p.fp8.data());
    for (int t = 0; t < 64; ++t) {
      bool rope = false;
      EXPECT_EQ(latent_error(p, t, &rope), 0.0) << "d_c " << d_c << " token " << t;
      EXPECT_TRUE(rope) << "d_c " << d_c << " token " << t;
    }
  }
}

TEST(Fp4ToFp8, WiderSpansRoundOnlyTheSmallGroups) {
  Pages p = make_pages(512, 64, 64, 100, 127, 21);  // span 27
  fp4_cache_to_fp8(p.l4, p.fp4.data(), 1, p.fp8.data());
  int inexact = 0;
  for (int t = 0; t < 64; ++t) {
    std::vector<uint8_t> codes(256), scales(16);
    std::vector<uint16_t> kpe(64);
    load_fp4_token(p.l4, p.fp4.data(), t, codes.data(), scales.data(), kpe.data());
    const int bmax = *std::max_element(scales.begin(), scales.end());
    bool rope = false;
    const double err = latent_error(p, t, &rope);
    EXPECT_TRUE(rope);
    // E4M3's smallest step at the token's scale 2^(bmax - 127 - 6) is 2^-9 of it: half that bounds the rounding.
    EXPECT_LE(err, std::ldexp(1.0, bmax - 127 - 6 - 10)) << "token " << t;
    inexact += err > 0 ? 1 : 0;
  }
  EXPECT_GT(inexact, 0) << "a span of 27 octaves must round some small groups";
}

TEST(Fp4ToFp8, PoisonedAndZeroTokens) {
  Pages p = make_pages(512, 64, 64, 120, 127, 31);
  std::vector<uint8_t> codes(256, 0x33), scales(16, 0);
  std::vector<uint16_t> kpe(64, float_to_bf16(1.5f));
  store_fp4_token(p.l4, p.fp4.data(), 3, codes.data(), scales.data(), kpe.data());  // all groups b = 0
  scales[5] = kFp4PoisonScale;
  store_fp4_token(p.l4, p.fp4.data(), 4, codes.data(), scales.data(), kpe.data());  // poisoned
  fp4_cache_to_fp8(p.l4, p.fp4.data(), 1, p.fp8.data());
  std::vector<uint8_t> x8(512);
  std::vector<uint16_t> k8(64);
  float s = 0;
  load_fp8_token(p.l8, p.fp8.data(), 4, x8.data(), k8.data(), &s);
  EXPECT_TRUE(std::isnan(s));
  for (uint8_t v : x8) EXPECT_EQ(v, 0);
  for (uint16_t v : k8) EXPECT_EQ(v, 0);
  load_fp8_token(p.l8, p.fp8.data(), 3, x8.data(), k8.data(), &s);
  EXPECT_EQ(s, std::ldexp(1.0f, kFp4ToFp8MinExponent - 6));  // the floor, not 2^-133
  bool rope = false;
  latent_error(p, 3, &rope);
  EXPECT_TRUE(rope) << "RoPE of a token of tiny latents must survive the conversion";
}

TEST(Fp4ToFp8, RefusesALayoutTheFp8FormatCannotHold) {
  std::vector<uint8_t> in(Fp4CacheLayout{64, 32, 64}.page_bytes()), out(1 << 16);
  EXPECT_NO_THROW(fp4_cache_to_fp8(Fp4CacheLayout{64, 32, 64}, in.data(), 1, out.data()));
  EXPECT_THROW(fp4_cache_to_fp8(Fp4CacheLayout{64, 48, 64}, in.data(), 1, out.data()), InputError);
}

}  // namespace
}  // namespace mla::quant
