// The paged 4-bit caches (quant/fp4_cache_format.hpp, quant/codebook_cache_format.hpp): byte
// layouts by hand and as bijections, bit-exact round trips against independent references
// (quant/fp4_kv.hpp's MX encoder/decoder; brute-force nearest level in double), poisoned and
// zero tokens, the append twins' placement across page edges and sentinel entries, refusals.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"

using namespace mla;
using namespace mla::quant;

namespace {

std::vector<float> randn(int n, std::mt19937& rng, float sd = 1.f) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_float(float_to_bf16(d(rng)));  // bf16 values, as the cache's input
  return v;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// A table like a fitted one: Gaussian Lloyd-Max centroids (SPEC section 3), in RMS units.
CodebookTable gaussian_table() {
  const double h[8] = {0.1284, 0.3881, 0.6568, 0.9423, 1.2562, 1.6181, 2.0690, 2.7326};
  std::vector<double> lv(16);
  for (int k = 0; k < 8; ++k) lv[7 - k] = -h[k], lv[8 + k] = h[k];
  return codebook_unit_levels(lv, 1.0);
}

// Marks every byte index that `offset(t, i)` reaches; each must be reached exactly once.
template <class F>
void mark(std::vector<int>& owned, int tokens, int row_bytes, F offset) {
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < row_bytes; ++i) ++owned.at(offset(t, i));
}

}  // namespace

TEST(Kv4CacheLayout, BytesPerTokenAndSections) {
  const Fp4CacheLayout f{64, 512, 64};
  EXPECT_EQ(f.bytes_per_token(), 400u);
  EXPECT_EQ(f.scale_offset(), 64u * 256u);
  EXPECT_EQ(f.rope_offset(), 64u * 272u);
  EXPECT_EQ(f.page_bytes(), 64u * 400u);
  const CodebookCacheLayout c{64, 512, 64};
  EXPECT_EQ(c.bytes_per_token(), 388u);
  EXPECT_EQ(c.scale_offset(), 64u * 256u);
  EXPECT_EQ(c.rope_offset(), 64u * 260u);
  // A TPLA slice: d_c = 64 (32-byte code rows, 2-byte scale rows stored plainly).
  const Fp4CacheLayout s{128, 64, 32};
  EXPECT_EQ(s.bytes_per_token(), 32u + 2u + 64u);
}

TEST(Kv4CacheLayout, SwizzledAndPlainOffsetsByHand) {
  const Fp4CacheLayout f{64, 512, 64};
  // Codes: 256-byte rows -> two 128-byte column blocks, swizzled as the FP8 latent.
  EXPECT_EQ(f.code_byte(0, 0), 0u);
  EXPECT_EQ(f.code_byte(9, 130), 64u * 128u + 1170u);  // block 1; chunk 0 ^ 1
  EXPECT_EQ(f.code_byte(7, 127), 7u * 128u + 15u);      // chunk 7 ^ 7
  // Scales: 16-byte rows, one chunk per row: W = 16 permutes nothing.
  EXPECT_EQ(f.scale_byte(5, 3), 64u * 256u + 5u * 16u + 3u);
  // Rope: 128-byte rows, value 3 of token 1 is bytes 6, 7: chunk 0 ^ 1.
  EXPECT_EQ(f.rope_byte(1, 3), 64u * 272u + 128u + 16u + 6u);
  // Narrow scale rows (d_c = 128: 4 bytes) are plain token-major.
  const Fp4CacheLayout n{64, 128, 32};
  EXPECT_EQ(n.scale_byte(10, 2), 64u * 64u + 10u * 4u + 2u);
  EXPECT_EQ(n.code_byte(2, 0), 2u * 64u + 16u);  // 64-byte swizzle: chunk ^ ((2 >> 1) & 3)
  const CodebookCacheLayout c{64, 512, 64};
  EXPECT_EQ(c.scale_byte(3), 64u * 256u + 12u);
  EXPECT_EQ(c.rope_byte(1, 3), 64u * 260u + 128u + 16u + 6u);
}

TEST(Kv4CacheLayout, EveryByteOfAPageIsOwnedOnce) {
  for (int P : {64, 128})
    for (int dc : {32, 64, 128, 256, 512})
      for (int dr : {16, 32, 64}) {
        const Fp4CacheLayout f{P, dc, dr};
        std::vector<int> owned(f.page_bytes(), 0);
        mark(owned, P, dc / 2, [&](int t, int i) { return f.code_byte(t, i); });
        mark(owned, P, dc / 32, [&](int t, int k) { return f.scale_byte(t, k); });
        mark(owned, P, 2 * dr, [&](int t, int b) { return f.rope_byte(t, b / 2) + b % 2; });
        for (size_t i = 0; i < owned.size(); ++i) ASSERT_EQ(owned[i], 1) << "fp4 P=" << P << " d_c=" << dc << " byte " << i;
        const CodebookCacheLayout c{P, dc, dr};
        std::vector<int> own2(c.page_bytes(), 0);
        mark(own2, P, dc / 2, [&](int t, int i) { return c.code_byte(t, i); });
        mark(own2, P, 4, [&](int t, int b) { return c.scale_byte(t) + b; });
        mark(own2, P, 2 * dr, [&](int t, int b) { return c.rope_byte(t, b / 2) + b % 2; });
        for (size_t i = 0; i < own2.size(); ++i) ASSERT_EQ(own2[i], 1) << "codebook P=" << P << " d_c=" << dc << " byte " << i;
      }
}

TEST(Kv4CacheLayout, RefusesWidthsThatAreNotAPowerOfTwo) {
  EXPECT_NE(message_of([] { validate_fp4_layout(Fp4CacheLayout{64, 96, 64}); }).find("d_c = 96"), std::string::npos);
  EXPECT_NE(message_of([] { validate_fp4_layout(Fp4CacheLayout{64, 48, 64}); }).find("d_c = 48"), std::string::npos);
  EXPECT_NE(message_of([] { validate_fp4_layout(Fp4CacheLayout{64, 16, 64}); }).find("d_c = 16"), std::string::npos);
  EXPECT_NE(message_of([] { validate_codebook_layout(CodebookCacheLayout{64, 192, 64}); }).find("d_c = 192"),
            std::string::npos);
  EXPECT_NE(message_of([] { validate_fp4_layout(Fp4CacheLayout{64, 512, 24}); }).find("d_r = 24"), std::string::npos);
  EXPECT_NE(message_of([] { validate_fp4_layout(Fp4CacheLayout{0, 512, 64}); }).find("page_size = 0"), std::string::npos);
  EXPECT_NE(message_of([] { validate_fp4_encoding(Fp4CacheEncoding{Fp4ScaleRule::Round, 0.f}); }).find("c = "),
            std::string::npos);
  EXPECT_NO_THROW(validate_fp4_layout(Fp4CacheLayout{64, 32, 16}));
}

TEST(Fp4CacheEncode, BitExactAgainstTheMxReferenceForEveryRule) {
  std::mt19937 rng(3);
  const int dc = 512, dr = 64;
  const Fp4CacheLayout l{64, dc, dr};
  std::vector<uint8_t> page(l.page_bytes(), 0);
  for (Fp4ScaleRule rule : {Fp4ScaleRule::Round, Fp4ScaleRule::OcpFloor, Fp4ScaleRule::Rceil})
    for (float c : {0.156f, 0.197f}) {
      const Fp4CacheEncoding e{rule, c};
      for (int t : {0, 17, 63}) {
        auto x = randn(dc, rng, t == 17 ? 1e-3f : 2.f);
        auto k = randn(dr, rng, 5.f);
        std::vector<uint8_t> codes(dc / 2), scales(dc / 32), rc(dc / 2), rs(dc / 32);
        std::vector<uint16_t> kpe(dr), rk(dr);
        ASSERT_TRUE(encode_fp4_token(e, x.data(), dc, k.data(), dr, codes.data(), scales.data(), kpe.data()));
        // Independent reference: the calibration's MX encoder.
        encode_fp4_mx(x.data(), dc, rule, c, rc.data(), rs.data());
        ASSERT_EQ(codes, rc);
        ASSERT_EQ(scales, rs);
        store_fp4_token(l, page.data(), t, codes.data(), scales.data(), kpe.data());
        std::fill(rc.begin(), rc.end(), 0xAB);
        load_fp4_token(l, page.data(), t, rc.data(), rs.data(), rk.data());
        EXPECT_EQ(rc, codes);
        EXPECT_EQ(rs, scales);
        EXPECT_EQ(rk, kpe);
        // Dequantised BF16 row == the reference decoder's fp32 values (exact in BF16), rope as stored.
        std::vector<float> ref(dc);
        decode_fp4_mx(codes.data(), scales.data(), dc, ref.data());
        std::vector<uint16_t> row(dc + dr);
        dequant_fp4_token_bf16(l, page.data(), t, row.data());
        for (int i = 0; i < dc; ++i) {
          ASSERT_EQ(bf16_to_float(row[i]), ref[i]) << "value " << i;
          ASSERT_EQ(float_to_bf16(ref[i]), row[i]);
        }
        for (int i = 0; i < dr; ++i) ASSERT_EQ(row[dc + i], float_to_bf16(k[i]));
        // The scale byte of group 0 by hand for the Round rule.
        if (rule == Fp4ScaleRule::Round) {
          float m = 0.f;
          for (int i = 0; i < 32; ++i) m = std::max(m, std::fabs(x[i]));
          const int E = static_cast<int>(std::lround(std::log2(static_cast<double>(c * m))));
          EXPECT_EQ(scales[0], E + 127);
        }
      }
    }
}

TEST(Fp4CacheEncode, PoisonedZeroAndExtremeTokens) {
  const int dc = 64, dr = 16;
  const Fp4CacheLayout l{64, dc, dr};
  std::vector<uint8_t> codes(dc / 2), scales(dc / 32);
  std::vector<uint16_t> kpe(dr);
  std::vector<float> x(dc, 1.f), k(dr, 1.f);
  for (int which : {0, 1, 2}) {
    std::vector<float> xx = x, kk = k;
    if (which == 0) xx[5] = std::nanf("");
    if (which == 1) kk[3] = INFINITY;
    if (which == 2) xx[63] = -INFINITY;
    EXPECT_FALSE(encode_fp4_token(Fp4CacheEncoding{}, xx.data(), dc, kk.data(), dr, codes.data(), scales.data(),
                                  kpe.data()));
    for (uint8_t s : scales) EXPECT_EQ(s, 0xFF);
    for (uint8_t b : codes) EXPECT_EQ(b, 0);
    for (uint16_t b : kpe) EXPECT_EQ(b, 0);
    std::vector<uint8_t> page(l.page_bytes(), 0);
    store_fp4_token(l, page.data(), 3, codes.data(), scales.data(), kpe.data());
    std::vector<uint16_t> row(dc + dr);
    dequant_fp4_token_bf16(l, page.data(), 3, row.data());
    for (int i = 0; i < dc; ++i) EXPECT_TRUE(std::isnan(bf16_to_float(row[i])));
    for (int i = 0; i < dr; ++i) EXPECT_EQ(row[dc + i], 0);
  }
  // A zero token: scale byte 0, zero codes, dequantised exactly 0.
  std::vector<float> z(dc, 0.f);
  EXPECT_TRUE(encode_fp4_token(Fp4CacheEncoding{}, z.data(), dc, k.data(), dr, codes.data(), scales.data(), kpe.data()));
  for (uint8_t s : scales) EXPECT_EQ(s, 0);
  for (uint8_t b : codes) EXPECT_EQ(b, 0);
  EXPECT_EQ(fp4_dequant_bf16(0, 0), 0);
  // The extremes of the dequantisation: 2^-128 and 3 * 2^-128 are exact BF16 subnormals;
  // code 6 (value 4) at b = 253 reaches 2^128 and becomes Inf; b = 254 with code 3 (1.5) is finite.
  EXPECT_EQ(bf16_to_float(fp4_dequant_bf16(1, 0)), std::ldexp(1.f, -128));
  EXPECT_EQ(bf16_to_float(fp4_dequant_bf16(3, 0)), std::ldexp(3.f, -128));
  EXPECT_TRUE(std::isinf(bf16_to_float(fp4_dequant_bf16(6, 253))));
  EXPECT_EQ(bf16_to_float(fp4_dequant_bf16(3 | 8, 254)), -std::ldexp(1.5f, 127));
  EXPECT_TRUE(std::isnan(bf16_to_float(fp4_dequant_bf16(0, 0xFF))));
}

TEST(CodebookCacheEncode, ScaleIndexAndRoundTrip) {
  std::mt19937 rng(5);
  const CodebookTable tab = gaussian_table();
  const int dc = 256, dr = 32;
  const CodebookCacheLayout l{64, dc, dr};
  std::vector<uint8_t> page(l.page_bytes(), 0);
  for (int t : {0, 31, 63}) {
    auto x = randn(dc, rng, 0.3f + t);
    auto k = randn(dr, rng);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    std::vector<uint8_t> codes(dc / 2), rc(dc / 2);
    std::vector<uint16_t> kpe(dr), rk(dr);
    float s = 0.f, rs = 0.f;
    ASSERT_TRUE(encode_codebook_token(tab, x.data(), dc, k.data(), dr, codes.data(), &s, kpe.data()));
    EXPECT_NEAR(s, std::sqrt(ss / dc), 1e-6 * std::sqrt(ss / dc));  // RMS, whatever the fp32 order
    EXPECT_EQ(s, codebook_token_scale(x.data(), dc));
    for (int i = 0; i < dc; ++i) {
      // Brute-force nearest level in double of the same fp32 quotient (no value here is a tie).
      const double v = x[i] / s;
      int best = 0;
      for (int q = 1; q < 16; ++q)
        if (std::fabs(v - tab.levels[q]) < std::fabs(v - tab.levels[best])) best = q;
      const int got = (i % 2) ? codes[i / 2] >> 4 : codes[i / 2] & 0xF;
      ASSERT_EQ(got, best) << "value " << i << " v = " << v;
    }
    store_codebook_token(l, page.data(), t, codes.data(), s, kpe.data());
    load_codebook_token(l, page.data(), t, rc.data(), &rs, rk.data());
    EXPECT_EQ(rc, codes);
    EXPECT_EQ(std::bit_cast<uint32_t>(rs), std::bit_cast<uint32_t>(s));
    EXPECT_EQ(rk, kpe);
    std::vector<uint16_t> row(dc + dr);
    dequant_codebook_token_bf16(l, tab, page.data(), t, row.data());
    for (int i = 0; i < dc; ++i) {
      const int idx = (i % 2) ? codes[i / 2] >> 4 : codes[i / 2] & 0xF;
      ASSERT_EQ(row[i], float_to_bf16(tab.levels[idx] * s));
    }
    for (int i = 0; i < dr; ++i) ASSERT_EQ(row[dc + i], float_to_bf16(k[i]));
  }
}

TEST(CodebookCacheEncode, TiesGoLowAndFixedOrderScale) {
  const CodebookTable tab = gaussian_table();
  const float mid = 0.5f * (tab.levels[8] + tab.levels[9]);
  EXPECT_EQ(codebook_index(tab, mid), 8);
  EXPECT_EQ(codebook_index(tab, std::nextafter(mid, 10.f)), 9);
  EXPECT_EQ(codebook_index(tab, -100.f), 0);
  EXPECT_EQ(codebook_index(tab, 100.f), 15);
  // The fixed order: lane partials then the butterfly, by hand for d_c = 64 (two terms a lane).
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = 1.f + i * 0.37f;
  float acc[32];
  for (int l = 0; l < 32; ++l) acc[l] = std::fma(x[l + 32], x[l + 32], std::fma(x[l], x[l], 0.f));
  for (int o = 16; o >= 1; o /= 2) {
    float n[32];
    for (int l = 0; l < 32; ++l) n[l] = acc[l] + acc[l ^ o];
    std::memcpy(acc, n, sizeof acc);
  }
  EXPECT_EQ(codebook_token_scale(x.data(), 64), std::sqrt(acc[0] / 64.f));
}

TEST(CodebookCacheEncode, PoisonedZeroTokensAndTables) {
  const CodebookTable tab = gaussian_table();
  const int dc = 32, dr = 16;
  std::vector<uint8_t> codes(dc / 2);
  std::vector<uint16_t> kpe(dr);
  float s = 0.f;
  std::vector<float> x(dc, 0.5f), k(dr, 1.f);
  x[7] = std::nanf("");
  EXPECT_FALSE(encode_codebook_token(tab, x.data(), dc, k.data(), dr, codes.data(), &s, kpe.data()));
  EXPECT_EQ(std::bit_cast<uint32_t>(s), kFp8PoisonScaleBits);
  for (uint8_t b : codes) EXPECT_EQ(b, 0);
  for (uint16_t b : kpe) EXPECT_EQ(b, 0);
  EXPECT_TRUE(std::isnan(bf16_to_float(codebook_dequant_bf16(tab, 3, s))));
  // Overflowing sum of squares: poisoned, not Inf.
  std::vector<float> big(dc, 3e38f);
  EXPECT_FALSE(encode_codebook_token(tab, big.data(), dc, k.data(), dr, codes.data(), &s, kpe.data()));
  // Zero row: s = 0, every index the one nearest 0 (ties low: 7), values 0.
  std::vector<float> z(dc, 0.f);
  EXPECT_TRUE(encode_codebook_token(tab, z.data(), dc, k.data(), dr, codes.data(), &s, kpe.data()));
  EXPECT_EQ(s, 0.f);
  for (uint8_t b : codes) EXPECT_EQ(b, 0x77);
  EXPECT_EQ(bf16_to_float(codebook_dequant_bf16(tab, 7, s)), 0.f);
  // Tables: unit levels = fitted / sqrt(mean_square); bad tables refused naming the value.
  std::vector<double> lv(16);
  for (int i = 0; i < 16; ++i) lv[i] = -1.5 + 0.2 * i;
  const CodebookTable u = codebook_unit_levels(lv, 4.0);
  EXPECT_EQ(u.levels[0], static_cast<float>(-0.75));
  lv[4] = lv[3];
  EXPECT_NE(message_of([&] { codebook_unit_levels(lv, 1.0); }).find("level 4"), std::string::npos);
  EXPECT_NE(message_of([&] { codebook_unit_levels(std::vector<double>(8, 0.0), 1.0); }).find("8 levels"),
            std::string::npos);
  EXPECT_NE(message_of([&] { codebook_unit_levels(std::vector<double>(16, 0.0), 0.0); }).find("mean_square = 0"),
            std::string::npos);
}

// Both append twins: tokens crossing page edges land in the right page and slot (permuted page
// table), every other byte (other pages, other slots) untouched; sentinel entries past the
// request are never read; a position on a sentinel is refused naming the entry.
TEST(Kv4CacheAppend, PlacementPageEdgesAndSentinels) {
  std::mt19937 rng(9);
  const int P = 64, dc = 128, dr = 32, dim = dc + dr, batch = 2, max_pages = 4, num_pages = 8;
  const Fp4CacheLayout fl{P, dc, dr};
  const CodebookCacheLayout cl{P, dc, dr};
  const CodebookTable tab = gaussian_table();
  const Fp4CacheEncoding enc{Fp4ScaleRule::Round, 0.197f};
  // Request 0 on pages 5, 2, then sentinels; request 1 on 7, 0, 3, -1.
  const std::vector<int32_t> table = {5, 2, -1, -1, 7, 0, 3, -1};
  const int n_new = 5;
  const std::vector<int32_t> pos = {P - 2, 2 * P - 3};  // both cross a page edge
  std::vector<uint16_t> kv(static_cast<size_t>(batch) * n_new * dim);
  for (auto& v : kv) v = float_to_bf16(std::normal_distribution<float>(0.f, 1.f)(rng));
  for (int fmt = 0; fmt < 2; ++fmt) {
    const size_t pb = fmt == 0 ? fl.page_bytes() : cl.page_bytes();
    std::vector<uint8_t> cache(pb * num_pages, 0xCD);
    if (fmt == 0)
      fp4_cache_append_twin(fl, enc, kv.data(), batch, n_new, pos.data(), table.data(), max_pages, cache.data(), num_pages);
    else
      codebook_cache_append_twin(cl, tab, kv.data(), batch, n_new, pos.data(), table.data(), max_pages, cache.data(),
                                 num_pages);
    std::vector<uint8_t> expect(pb * num_pages, 0xCD);
    std::vector<float> xf(dc), kf(dr);
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < n_new; ++i) {
        const int p = pos[b] + i, page = table[b * max_pages + p / P], slot = p % P;
        const uint16_t* src = kv.data() + (static_cast<size_t>(b) * n_new + i) * dim;
        for (int c = 0; c < dc; ++c) xf[c] = bf16_to_float(src[c]);
        for (int c = 0; c < dr; ++c) kf[c] = bf16_to_float(src[dc + c]);
        std::vector<uint8_t> codes(dc / 2), scales(dc / 32);
        std::vector<uint16_t> kpe(dr);
        uint8_t* pg = expect.data() + static_cast<size_t>(page) * pb;
        if (fmt == 0) {
          encode_fp4_token(enc, xf.data(), dc, kf.data(), dr, codes.data(), scales.data(), kpe.data());
          store_fp4_token(fl, pg, slot, codes.data(), scales.data(), kpe.data());
        } else {
          float s;
          encode_codebook_token(tab, xf.data(), dc, kf.data(), dr, codes.data(), &s, kpe.data());
          store_codebook_token(cl, pg, slot, codes.data(), s, kpe.data());
        }
      }
    ASSERT_EQ(cache, expect) << (fmt == 0 ? "fp4" : "codebook");
    // Page 1, 4, 6 (no request) untouched: implied by the equality above; check one explicitly.
    for (size_t i = 0; i < pb; ++i) ASSERT_EQ(cache[pb * 1 + i], 0xCD);
    // A write onto the sentinel entry page_table[0][2] = -1.
    const std::vector<int32_t> far = {2 * P - 1, 0};
    const std::string msg = message_of([&] {
      if (fmt == 0)
        fp4_cache_append_twin(fl, enc, kv.data(), batch, 2, far.data(), table.data(), max_pages, cache.data(), num_pages);
      else
        codebook_cache_append_twin(cl, tab, kv.data(), batch, 2, far.data(), table.data(), max_pages, cache.data(),
                                   num_pages);
    });
    EXPECT_NE(msg.find("page_table[0][2] = -1"), std::string::npos) << msg;
    const std::vector<int32_t> out = {0, max_pages * P};
    EXPECT_NE(message_of([&] {
                fp4_cache_append_twin(fl, enc, kv.data(), batch, 2, out.data(), table.data(), max_pages, cache.data(),
                                      num_pages);
              }).find("position 256 of request 1"),
              std::string::npos);
  }
}

// The dequantised BF16 cache is the pages' rows at the same page ids (the decode twin's input).
TEST(Kv4CacheDequant, WholeCacheToBf16MatchesPerToken) {
  std::mt19937 rng(11);
  const int P = 64, dc = 64, dr = 16, num_pages = 3;
  const Fp4CacheLayout fl{P, dc, dr};
  std::vector<uint8_t> cache(fl.page_bytes() * num_pages);
  for (auto& b : cache) b = static_cast<uint8_t>(rng());
  std::vector<uint16_t> bf(static_cast<size_t>(num_pages) * P * (dc + dr)), row(dc + dr);
  fp4_cache_to_bf16(fl, cache.data(), num_pages, bf.data());
  for (int p = 0; p < num_pages; ++p)
    for (int t = 0; t < P; t += 7) {
      dequant_fp4_token_bf16(fl, cache.data() + p * fl.page_bytes(), t, row.data());
      for (int i = 0; i < dc + dr; ++i) {
        const uint16_t a = bf[(static_cast<size_t>(p) * P + t) * (dc + dr) + i];
        ASSERT_TRUE(a == row[i] || (std::isnan(bf16_to_float(a)) && std::isnan(bf16_to_float(row[i]))));
      }
    }
}
