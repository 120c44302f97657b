// The FP8 decode twin (quant/fp8_decode_twin.hpp) against float64, with tolerances from the
// E4M3 grid; masks (lengths, page edges, s_q = 2), NaN-poisoned unused pages, sentinel page-table
// entries, poisoned and zero-amax tokens, split-KV consistency.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "fp8_decode_case.hpp"
#include "model/metrics.hpp"

using namespace mla;
using namespace mla::quant;
using mla::test::Fp8Case;

namespace {

// Tolerances (SPEC 5 metrics), from the E4M3 grid: round to nearest with 3 mantissa bits has a
// relative error uniform in +-2^-4 of the binade's low end, RMS 2^-3 / (sqrt(12) * 1.5) ~ 0.024 of
// the value on average over a binade.
//  * decode vs float64 on the values the format stores (cache and query dequantised): only the
//    P re-quantisation (E4M3 per 64-token block) and fp32/bf16 roundings remain; each weight's
//    relative error has RMS <= 0.024, so the output's relative L2 (errors of independent weights
//    combined with the weights themselves) stays below that RMS: bound 0.03.
constexpr double kPvRelL2 = 0.03;
//  * decode vs float64 on the model's bf16 values: adds the cache and query E4M3 roundings. For
//    these random data the output is an average of near-independent latent rows, so each error
//    source shows up relative to |out| at about its own RMS: V (latent) rounding 0.024, P
//    re-quantisation <= 0.024, and the logits' error 0.034 * (logit spread ~1.5) ~ 0.05 moving
//    the weights. In quadrature 0.06; bound 0.08 for the spread between samples (measured
//    0.025 .. 0.058 over the cases below).
constexpr double kFp8RelL2 = 0.08;
// Cosine difference is ~ rel_l2^2 / 2 for small errors.
constexpr double kFp8CosDiff = 3.2e-3;
// LSE (natural log): it moves by at most the largest logit error, whose standard deviation is
// Fp8Case::logit_error_sd (0.034 = sqrt(2) * 0.024 relative on each product q_i x_i): allow 5 of
// them, plus fp32 rounding.
constexpr double kLseSigmas = 5.0;

std::vector<double> to_double(const std::vector<uint16_t>& bf) {
  std::vector<double> v(bf.size());
  for (size_t i = 0; i < bf.size(); ++i) v[i] = bf16_to_float(bf[i]);
  return v;
}

struct TwinRun {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};
TwinRun run_twin(const Fp8Case& c, int parts = 0) {
  TwinRun r;
  Fp8DecodeParams p = c.params(r.out, r.lse);
  p.num_parts = parts;
  fp8_decode_twin(p);
  return r;
}

void expect_close(const Fp8Case& c, const TwinRun& r, const char* what) {
  std::vector<double> ref, ref_lse, deq, deq_lse;
  c.reference(false, ref, ref_lse);
  c.reference(true, deq, deq_lse);
  const auto y = to_double(r.out);
  const auto vs_deq = model::compare(y, deq);
  const auto vs_ref = model::compare(y, ref);
  ASSERT_TRUE(vs_ref.nonfinite_match) << what << ": " << vs_ref.summary();
  std::printf("%s: vs dequantised rel_l2 %.3e cos %.2e | vs bf16 values rel_l2 %.3e cos %.2e\n", what, vs_deq.rel_l2,
              vs_deq.cos_diff, vs_ref.rel_l2, vs_ref.cos_diff);
  EXPECT_LE(vs_deq.rel_l2, kPvRelL2) << what << " vs dequantised: " << vs_deq.summary();
  EXPECT_LE(vs_ref.rel_l2, kFp8RelL2) << what << " vs bf16 values: " << vs_ref.summary();
  EXPECT_LE(vs_ref.cos_diff, kFp8CosDiff) << what << ": " << vs_ref.summary();
  for (size_t i = 0; i < ref_lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) {
      EXPECT_TRUE(std::isinf(r.lse[i]) && r.lse[i] < 0) << what << " row " << i;
      continue;
    }
    const int b = static_cast<int>(i) / c.rows(), row = static_cast<int>(i) % c.rows();
    EXPECT_NEAR(r.lse[i], ref_lse[i], kLseSigmas * c.logit_error_sd(b, row) + 1e-4) << what << " row " << i;
  }
}

}  // namespace

TEST(Fp8DecodeTwin, MatchesFloat64AcrossShapes) {
  struct Shape {
    int s_q, heads, d_c, d_r, page;
    std::vector<int> lens;
  };
  const Shape shapes[] = {
      {1, 16, 512, 64, 64, {300, 1000}},   {1, 128, 512, 64, 64, {200}},   {2, 8, 256, 64, 128, {257, 64}},
      {1, 4, 128, 32, 64, {129, 1}},       {2, 16, 64, 32, 64, {190, 65}}, {1, 1, 512, 64, 128, {5}},
  };
  uint32_t seed = 11;
  for (const auto& s : shapes) {
    Fp8Case c;
    c.batch = static_cast<int>(s.lens.size());
    c.s_q = s.s_q;
    c.heads = s.heads;
    c.d_c = s.d_c;
    c.d_r = s.d_r;
    c.page_size = s.page;
    c.lens = s.lens;
    c.build(seed++);
    const TwinRun r = run_twin(c);
    expect_close(c, r, ("H=" + std::to_string(s.heads) + " d_c=" + std::to_string(s.d_c)).c_str());
  }
}

TEST(Fp8DecodeTwin, PageEdgesAndLengthOne) {
  for (int page : {64, 128})
    for (int L : {1, 2, 63, 64, 65, 127, 128, 129, 192}) {
      Fp8Case c;
      c.batch = 1;
      c.s_q = 2;
      c.heads = 4;
      c.d_c = 128;
      c.d_r = 64;
      c.page_size = page;
      c.lens = {L};
      c.build(100 + L);
      const TwinRun r = run_twin(c);
      expect_close(c, r, ("L=" + std::to_string(L)).c_str());
      if (L == 1) {
        // s_q = 2, L = 1: the first query token sees no key (out 0, lse -inf).
        for (int h = 0; h < 4; ++h) EXPECT_TRUE(std::isinf(r.lse[h]) && r.lse[h] < 0);
        for (int i = 0; i < 4 * 128; ++i) EXPECT_EQ(r.out[i], 0);
      }
    }
}

TEST(Fp8DecodeTwin, UnusedBytesNeverReachTheOutput) {
  // Same problem with unused cache bytes all 0xFF (E4M3 NaN, NaN scales) and all zero: identical
  // bits, and the page table's -1 entries past each request are never read.
  Fp8Case a, z;
  for (Fp8Case* c : {&a, &z}) {
    c->batch = 3;
    c->s_q = 2;
    c->heads = 16;
    c->d_c = 256;
    c->lens = {70, 1, 129};
  }
  a.build(5, 0xFF);
  z.build(5, 0x00);
  const TwinRun ra = run_twin(a), rz = run_twin(z);
  EXPECT_EQ(ra.out, rz.out);
  for (size_t i = 0; i < ra.lse.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(ra.lse[i]), std::bit_cast<uint32_t>(rz.lse[i]));
  for (auto v : ra.out) ASSERT_FALSE(std::isnan(bf16_to_float(v)));
}

TEST(Fp8DecodeTwin, PoisonedTokenOnlyReachesRowsThatSeeIt) {
  Fp8Case c;
  c.batch = 1;
  c.s_q = 2;
  c.heads = 4;
  c.d_c = 128;
  c.lens = {100};
  c.build(21);
  // The last token holds an Inf: the second query token sees it, the first (causal) does not.
  c.kv[static_cast<size_t>(99) * c.dim() + 3] = float_to_bf16(INFINITY);
  std::fill(c.cache.begin(), c.cache.end(), 0xFF);
  c.append_all();
  const TwinRun r = run_twin(c);
  for (int row = 0; row < c.rows(); ++row)
    for (int i = 0; i < c.d_c; ++i) {
      const float v = bf16_to_float(r.out[row * c.d_c + i]);
      if (row < c.heads) ASSERT_TRUE(std::isfinite(v)) << row;
      else ASSERT_TRUE(std::isnan(v)) << row;
    }
  // The rows that do not see it match float64 (whose rows that see it hold NaN or not depending
  // on the sign of the infinite logit: 0 * Inf only in the Inf channel for a -Inf logit; the
  // FP8 path makes every such row NaN).
  std::vector<double> ref, ref_lse;
  c.reference(false, ref, ref_lse);
  const size_t n = static_cast<size_t>(c.heads) * c.d_c;
  const auto y = to_double(r.out);
  const auto m = model::compare(std::span<const double>(y.data(), n), std::span<const double>(ref.data(), n));
  EXPECT_TRUE(m.nonfinite_match) << m.summary();
  EXPECT_LE(m.rel_l2, kFp8RelL2) << m.summary();
}

TEST(Fp8DecodeTwin, ZeroAmaxTokensStayFinite) {
  Fp8Case c;
  c.batch = 1;
  c.heads = 8;
  c.d_c = 128;
  c.lens = {80};
  c.build(23);
  for (int t : {0, 40, 79})
    for (int i = 0; i < c.d_c; ++i) c.kv[static_cast<size_t>(t) * c.dim() + i] = 0;
  c.append_all();
  const TwinRun r = run_twin(c);
  for (auto v : r.out) ASSERT_TRUE(std::isfinite(bf16_to_float(v)));
  expect_close(c, r, "zero-amax tokens");
}

// A hot token, then tiles 2^-100 and 2^-117.5 below it: the block scale's lower bound
// (kFp8SigmaFloor) keeps O and l finite (they overflowed to NaN without it) and the output is the
// hot token's value row, as in float64. One split part, so every tile of a request passes the
// same online softmax (more parts would start the cold tiles' splits afresh).
TEST(Fp8DecodeTwin, VeryColdTilesAfterAHotOneStayFinite) {
  for (int d_c : {512, 256}) {
    Fp8Case c;
    c.batch = 2;
    c.heads = 4;
    c.d_c = d_c;
    c.lens = {200, 131};
    c.build(29);
    c.make_cold_tiles();
    const TwinRun r = run_twin(c, 1);  // one split: the cold tiles follow the hot one in one softmax
    for (auto v : r.out) ASSERT_TRUE(std::isfinite(bf16_to_float(v))) << "d_c " << d_c;
    for (float v : r.lse) ASSERT_TRUE(std::isfinite(v)) << "d_c " << d_c;
    expect_close(c, r, ("very cold tiles d_c=" + std::to_string(d_c)).c_str());
  }
}

TEST(Fp8DecodeTwin, SplitKvAgreesWithOneSplit) {
  Fp8Case c;
  c.batch = 2;
  c.heads = 16;
  c.d_c = 512;
  c.lens = {2000, 700};
  c.build(31);
  const TwinRun one = run_twin(c, 1), many = run_twin(c, 40);
  const auto m = model::compare(to_double(many.out), to_double(one.out));
  // Tiles are the same 64-token P blocks either way; only the running max (hence exp2 inputs
  // and, rarely, an E4M3 rounding of P) and the fp32 merge differ.
  EXPECT_LE(m.rel_l2, 5e-3) << m.summary();
  expect_close(c, many, "40 parts");
}

TEST(Fp8DecodeTwin, RejectsBadParamsAndPages) {
  Fp8Case c;
  c.batch = 1;
  c.heads = 4;
  c.d_c = 128;
  c.lens = {70};
  c.build(3);
  std::vector<uint16_t> out;
  std::vector<float> lse;
  Fp8DecodeParams p = c.params(out, lse);
  p.heads = 129;
  EXPECT_THROW(fp8_decode_twin(p), InputError);
  p = c.params(out, lse);
  p.d_c = 96;
  EXPECT_THROW(fp8_decode_twin(p), InputError);
  c.table[1] = 999;  // second page of the request
  p = c.params(out, lse);
  try {
    fp8_decode_twin(p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("page_table[0][1] = 999"), std::string::npos) << e.what();
  }
}
