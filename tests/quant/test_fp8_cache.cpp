// The paged FP8 cache format (quant/fp8_cache_format.hpp): byte layout by hand, round trip
// bounded by the E4M3 grid, poisoned and zero-amax tokens, the append twin's placement, query
// quantisation, and FlashMLA's V3.2 layout as input.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/fp8_cache_format.hpp"

using namespace mla;
using namespace mla::quant;

namespace {

std::vector<float> randn(int n, std::mt19937& rng, float sd = 1.f) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(Fp8CacheLayout, BytesPerTokenAndSections) {
  const Fp8CacheLayout l{64, 512, 64};
  EXPECT_EQ(l.bytes_per_token(), 644u);
  EXPECT_EQ(l.page_bytes(), 64u * 644u);
  EXPECT_EQ(l.rope_offset(), 64u * 512u);
  EXPECT_EQ(l.scale_offset(), 64u * 512u + 64u * 128u);
  const Fp8CacheLayout l128{128, 256, 64};
  EXPECT_EQ(l128.bytes_per_token(), 256u + 128u + 4u);
  EXPECT_EQ(l128.page_bytes(), 128u * 388u);
}

TEST(Fp8CacheLayout, SwizzledOffsetsByHand) {
  const Fp8CacheLayout l{64, 512, 64};
  // Token 0, byte 0: block 0, no permutation.
  EXPECT_EQ(l.latent_byte(0, 0), 0u);
  // Token 9, channel 130: block 1 (8192), linear 9*128 + 2 = 1154; bits 7..9 of 1154 = 1, so
  // chunk 0 -> chunk 1: 1170.
  EXPECT_EQ(l.latent_byte(9, 130), 8192u + 1170u);
  // Token 7, channel 127 (chunk 7 of row 7): 7*128 + 127 = 1023, chunk 7 ^ 7 = 0 -> 7*128 + 15.
  EXPECT_EQ(l.latent_byte(7, 127), 7u * 128u + 15u);
  // Token 8 wraps the pattern: no permutation.
  EXPECT_EQ(l.latent_byte(8, 17), 8u * 128u + 17u);
  // Rope value 3 of token 1 (bytes 6, 7 of a 128-byte row): chunk 0 ^ 1 = 1.
  EXPECT_EQ(l.rope_byte(1, 3), 64u * 512u + 128u + 16u + 6u);
  EXPECT_EQ(l.scale_byte(5), 64u * 640u + 20u);
  // A 64-byte-wide section (d_c = 64): the 64-byte swizzle XORs chunk with (t >> 1) & 3.
  const Fp8CacheLayout s{64, 64, 32};
  EXPECT_EQ(s.latent_byte(2, 0), 2u * 64u + 16u);   // (2 >> 1) & 3 = 1
  EXPECT_EQ(s.latent_byte(6, 48), 6u * 64u + 0u);   // chunk 3 ^ 3 = 0
  EXPECT_EQ(s.rope_byte(3, 0), 64u * 64u + 3u * 64u + 16u);
}

TEST(Fp8CacheLayout, EveryByteOfAPageIsOwnedOnce) {
  for (const Fp8CacheLayout l : {Fp8CacheLayout{64, 512, 64}, Fp8CacheLayout{128, 128, 32}, Fp8CacheLayout{64, 64, 32}}) {
    std::vector<int> owner(l.page_bytes(), 0);
    for (int t = 0; t < l.page_size; ++t) {
      for (int i = 0; i < l.d_c; ++i) ++owner[l.latent_byte(t, i)];
      for (int i = 0; i < l.d_r; ++i) {
        ++owner[l.rope_byte(t, i)];
        ++owner[l.rope_byte(t, i) + 1];
      }
      for (int i = 0; i < 4; ++i) ++owner[l.scale_byte(t) + i];
    }
    for (size_t i = 0; i < owner.size(); ++i) ASSERT_EQ(owner[i], 1) << "byte " << i << " d_c " << l.d_c;
  }
}

TEST(Fp8CacheLayout, RejectsUnencodableShapes) {
  EXPECT_THROW(validate_fp8_layout(Fp8CacheLayout{64, 96, 64}), InputError);
  EXPECT_THROW(validate_fp8_layout(Fp8CacheLayout{64, 512, 24}), InputError);
  EXPECT_THROW(validate_fp8_layout(Fp8CacheLayout{0, 512, 64}), InputError);
  EXPECT_NO_THROW(validate_fp8_layout(Fp8CacheLayout{128, 256, 32}));
}

TEST(Fp8CacheEncode, RoundTripWithinTheE4M3Grid) {
  std::mt19937 rng(3);
  const Fp8CacheLayout l{64, 512, 64};
  std::vector<uint8_t> page(l.page_bytes(), 0xFF);
  for (int t = 0; t < l.page_size; ++t) {
    auto x = randn(l.d_c, rng, 0.5f + t), k = randn(l.d_r, rng, 3.f);
    std::vector<uint8_t> x8(l.d_c);
    std::vector<uint16_t> kpe(l.d_r);
    float s = 0;
    ASSERT_TRUE(encode_fp8_token(x.data(), l.d_c, k.data(), l.d_r, x8.data(), kpe.data(), &s));
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    EXPECT_EQ(s, amax / 448.f);
    store_fp8_token(l, page.data(), t, x8.data(), kpe.data(), s);
    std::vector<float> xd(l.d_c), kd(l.d_r);
    dequant_fp8_token(l, page.data(), t, xd.data(), kd.data());
    for (int i = 0; i < l.d_c; ++i) {
      // E4M3: 3 mantissa bits -> half an ulp is 2^-4 relative for normals; below 2^-6 (in
      // units of s) the subnormal step 2^-9 gives an absolute half step of 2^-10 s. The fp32
      // division and product add at most a few fp32 ulps.
      const double bound = std::max(std::ldexp(double(std::fabs(x[i])), -4), std::ldexp(double(s), -10)) * (1 + 1e-6);
      ASSERT_LE(std::fabs(xd[i] - x[i]), bound) << "t " << t << " i " << i;
      if (std::fabs(x[i]) == amax) {
        EXPECT_NEAR(std::fabs(xd[i]), amax, amax * 1e-6) << "the amax element is 448 s";
      }
    }
    // k_pe: bf16 (8 bits) of k_pe / s, times s: relative 2^-9 plus fp32 rounding.
    for (int i = 0; i < l.d_r; ++i) ASSERT_LE(std::fabs(kd[i] - k[i]), std::ldexp(std::fabs(k[i]), -8)) << i;
  }
}

TEST(Fp8CacheEncode, PoisonedAndZeroAmaxTokens) {
  const int d_c = 128, d_r = 32;
  std::vector<float> x(d_c, 0.5f), k(d_r, 1.f);
  std::vector<uint8_t> x8(d_c, 0xAA);
  std::vector<uint16_t> kpe(d_r, 0xAAAA);
  float s = 0;
  x[17] = INFINITY;
  EXPECT_FALSE(encode_fp8_token(x.data(), d_c, k.data(), d_r, x8.data(), kpe.data(), &s));
  EXPECT_EQ(std::bit_cast<uint32_t>(s), kFp8PoisonScaleBits);
  for (auto v : x8) EXPECT_EQ(v, 0);
  for (auto v : kpe) EXPECT_EQ(v, 0);
  x[17] = 0.5f;
  k[3] = NAN;
  EXPECT_FALSE(encode_fp8_token(x.data(), d_c, k.data(), d_r, x8.data(), kpe.data(), &s));
  EXPECT_TRUE(std::isnan(s));
  // All-zero latent: the floor scale 1e-12 / 448, zero codes, k_pe divided by that scale.
  std::fill(x.begin(), x.end(), 0.f);
  k[3] = 2.f;
  EXPECT_TRUE(encode_fp8_token(x.data(), d_c, k.data(), d_r, x8.data(), kpe.data(), &s));
  EXPECT_EQ(s, 1e-12f / 448.f);
  for (auto v : x8) EXPECT_EQ(v, 0);
  EXPECT_EQ(kpe[3], float_to_bf16(2.f / s));
  EXPECT_TRUE(std::isfinite(bf16_to_float(kpe[3])));
}

TEST(Fp8CacheAppend, WritesOnlyTheTargetSlotsEveryByte) {
  std::mt19937 rng(5);
  const Fp8CacheLayout l{64, 256, 64};
  const int batch = 2, n_new = 70, max_pages = 4, num_pages = 6, dim = l.d_c + l.d_r;
  const std::vector<int32_t> table = {3, 1, 5, -1, 0, 2, 4, -1};
  const std::vector<int32_t> pos = {10, 60};
  std::vector<uint16_t> kv(static_cast<size_t>(batch) * n_new * dim);
  for (auto& v : kv) v = float_to_bf16(std::normal_distribution<float>(0.f, 2.f)(rng));
  std::vector<uint8_t> cache(num_pages * l.page_bytes(), 0xEE);
  fp8_cache_append_twin(l, kv.data(), batch, n_new, pos.data(), table.data(), max_pages, cache.data(), num_pages);
  std::vector<uint8_t> expect(num_pages * l.page_bytes(), 0xEE);
  std::vector<float> xf(l.d_c), kf(l.d_r);
  std::vector<uint8_t> x8(l.d_c);
  std::vector<uint16_t> kpe(l.d_r);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < n_new; ++i) {
      const int p = pos[b] + i;
      const int page = table[b * max_pages + p / 64];
      for (int c = 0; c < l.d_c; ++c) xf[c] = bf16_to_float(kv[(b * n_new + i) * dim + c]);
      for (int c = 0; c < l.d_r; ++c) kf[c] = bf16_to_float(kv[(b * n_new + i) * dim + l.d_c + c]);
      float s;
      encode_fp8_token(xf.data(), l.d_c, kf.data(), l.d_r, x8.data(), kpe.data(), &s);
      store_fp8_token(l, expect.data() + page * l.page_bytes(), p % 64, x8.data(), kpe.data(), s);
    }
  EXPECT_EQ(cache, expect);
  // Page 5 is never reached by a written position: untouched.
  for (size_t i = 0; i < l.page_bytes(); ++i) ASSERT_EQ(cache[5 * l.page_bytes() + i], 0xEE);
  // A position needing a sentinel page id is an error naming the entry.
  const std::vector<int32_t> far = {200, 0};
  try {
    fp8_cache_append_twin(l, kv.data(), batch, 1, far.data(), table.data(), max_pages, cache.data(), num_pages);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("page_table[0][3] = -1"), std::string::npos) << e.what();
  }
}

TEST(Fp8Query, PerRowScaleAndPreDividedRope) {
  std::mt19937 rng(7);
  const int rows = 5, d_c = 128, d_r = 32, dim = d_c + d_r;
  std::vector<uint16_t> q(rows * dim);
  for (auto& v : q) v = float_to_bf16(std::normal_distribution<float>(0.f, 1.f)(rng));
  q[2 * dim + 4] = float_to_bf16(INFINITY);
  std::vector<uint8_t> q8(rows * d_c);
  std::vector<uint16_t> qr(rows * d_r);
  std::vector<float> qs(rows);
  fp8_quantize_query_twin(q.data(), rows, d_c, d_r, q8.data(), qr.data(), qs.data());
  for (int r = 0; r < rows; ++r) {
    if (r == 2) {
      EXPECT_TRUE(std::isnan(qs[r]));
      continue;
    }
    float amax = 0;
    for (int i = 0; i < d_c; ++i) amax = std::max(amax, std::fabs(bf16_to_float(q[r * dim + i])));
    ASSERT_EQ(qs[r], amax / 448.f);
    for (int i = 0; i < d_c; ++i) ASSERT_EQ(q8[r * d_c + i], float_to_e4m3(bf16_to_float(q[r * dim + i]) / qs[r]));
    for (int i = 0; i < d_r; ++i) ASSERT_EQ(qr[r * d_r + i], float_to_bf16(bf16_to_float(q[r * dim + d_c + i]) / qs[r]));
  }
}

TEST(FlashMlaV32, LayoutAndConversionToOurFormat) {
  std::mt19937 rng(9);
  const FlashMlaV32Layout v{64, 512, 64, 65 * 656};  // FlashMLA's allocator pads a token per block
  EXPECT_EQ(v.bytes_per_token(), 656u);
  const Fp8CacheLayout l{64, 512, 64};
  const int blocks = 2;
  std::vector<uint8_t> src(blocks * v.stride(), 0);
  std::vector<std::vector<float>> xs, ks;
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 64; ++t) {
      auto x = randn(512, rng, 0.2f + 0.05f * t), k = randn(64, rng);
      for (auto& e : k) e = bf16_to_float(float_to_bf16(e));
      encode_flashmla_v32_token(v, x.data(), k.data(), src.data() + b * v.stride() + t * 656);
      xs.push_back(x);
      ks.push_back(k);
    }
  // Scales are powers of two >= amax / 448 per 128 values.
  float s0;
  std::memcpy(&s0, src.data() + 512, 4);
  int e;
  EXPECT_EQ(std::frexp(s0, &e), 0.5f);
  std::vector<uint8_t> ours(blocks * l.page_bytes());
  convert_flashmla_v32_cache(v, src.data(), blocks, l, ours.data());
  std::vector<float> xv(512), kv(64), xo(512), ko(64);
  std::vector<uint8_t> x8(512);
  std::vector<uint16_t> kpe(64);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 64; ++t) {
      dequant_flashmla_v32_token(v, src.data() + b * v.stride() + t * 656, xv.data(), kv.data());
      // The conversion is our encoding of the V3.2 cache's exact values, byte for byte.
      float s;
      encode_fp8_token(xv.data(), 512, kv.data(), 64, x8.data(), kpe.data(), &s);
      std::vector<uint8_t> one(l.page_bytes(), 0);
      store_fp8_token(l, one.data(), t, x8.data(), kpe.data(), s);
      const uint8_t* page = ours.data() + b * l.page_bytes();
      for (int i = 0; i < 512; ++i) ASSERT_EQ(page[l.latent_byte(t, i)], x8[i]);
      dequant_fp8_token(l, page, t, xo.data(), ko.data());
      // Two E4M3 roundings of the original: each within 2^-4 relative (+ subnormal floor).
      const auto& x = xs[b * 64 + t];
      float amax = 0;
      for (float q : x) amax = std::max(amax, std::fabs(q));
      for (int i = 0; i < 512; ++i)
        ASSERT_LE(std::fabs(xo[i] - x[i]), 2 * std::max(std::ldexp(std::fabs(x[i]), -4), std::ldexp(amax / 448.f, -9)) + 1e-7f) << i;
      for (int i = 0; i < 64; ++i) ASSERT_LE(std::fabs(ko[i] - ks[b * 64 + t][i]), std::ldexp(std::fabs(ks[b * 64 + t][i]), -8));
    }
  EXPECT_THROW(convert_flashmla_v32_cache(v, src.data(), blocks, Fp8CacheLayout{128, 512, 64}, ours.data()), InputError);
}
