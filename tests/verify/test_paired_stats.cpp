// The end-to-end comparison's statistics: per-token scoring, the Student t quantile, and the
// paired interval on a synthetic case with a known effect (a fixed logit perturbation).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "verify/paired_stats.hpp"

using mla::MatrixR;
using namespace mla::verify;

TEST(PairedStats, StudentTQuantileMatchesTables) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.7062047, 1e-5);
  EXPECT_NEAR(student_t_quantile(0.975, 7), 2.3646243, 1e-6);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0422725, 1e-6);
  EXPECT_NEAR(student_t_quantile(0.995, 10), 3.1692727, 1e-6);
  EXPECT_NEAR(student_t_quantile(0.975, 0), 1.9599640, 1e-6);  // df 0: normal
  EXPECT_NEAR(student_t_quantile(0.025, 7), -2.3646243, 1e-6);
  EXPECT_THROW(student_t_quantile(1.0, 3), mla::InputError);
}

TEST(PairedStats, ScoreTokensIsNextTokenNllAndArgmax) {
  MatrixR logits(3, 4);
  logits << 0, 1, 2, 3,  //
      5, 0, 0, 0,        //
      0, 0, 9, 0;
  const std::vector<int32_t> tokens = {0, 2, 0};
  const TokenScores s = score_tokens(logits, tokens, 0, 3);
  ASSERT_EQ(s.nll.size(), 2u);  // rows 0 and 1 predict tokens 1 and 2
  const double lse0 = std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(s.nll[0], lse0 - 2.0, 1e-12);
  EXPECT_NEAR(s.nll[1], std::log(std::exp(5.0) + 3.0) - 5.0, 1e-12);
  EXPECT_EQ(s.top1[0], 3);
  EXPECT_EQ(s.top1[1], 0);
}

namespace {

// `windows` windows of `len` next-token predictions over a vocabulary of V: base logits drawn
// at random, tokens drawn from the base model (so the base model is the data's distribution),
// test logits = base + delta on vocabulary entry `v`. Returns the known expected change of the
// loss per token in bits: E_y[d] = log(1 - p_v + p_v e^delta) - delta p_v, averaged over rows.
double make_case(uint64_t seed, int windows, int len, double delta, std::vector<TokenScores>& base,
                 std::vector<TokenScores>& test) {
  constexpr int V = 16, v = 3;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.5);
  double expected = 0;
  base.assign(windows, {});
  test.assign(windows, {});
  for (int w = 0; w < windows; ++w) {
    MatrixR lb(len + 1, V);
    for (int i = 0; i < lb.size(); ++i) lb.data()[i] = z(rng);
    std::vector<int32_t> tokens(len + 1, 0);
    for (int t = 0; t < len; ++t) {
      const Eigen::RowVectorXd p = lb.row(t).array().exp() / lb.row(t).array().exp().sum();
      std::discrete_distribution<int> pick(p.data(), p.data() + V);
      tokens[t + 1] = pick(rng);
      expected += std::log(1 - p(v) + p(v) * std::exp(delta)) - delta * p(v);
    }
    MatrixR lt = lb;
    lt.col(v).array() += delta;
    base[w] = score_tokens(lb, tokens, 0, len + 1);
    test[w] = score_tokens(lt, tokens, 0, len + 1);
  }
  return expected / (static_cast<double>(windows) * len) / std::log(2.0);
}

}  // namespace

TEST(PairedStats, IntervalExcludesZeroAndContainsTheKnownChange) {
  std::vector<TokenScores> base, test;
  const double known = make_case(7, 64, 100, 1.0, base, test);
  const PairedComparison c = compare_paired(base, test);
  EXPECT_EQ(c.windows, 64);
  EXPECT_EQ(c.tokens, 6400);
  EXPECT_GT(known, 0.0);
  EXPECT_TRUE(c.excludes_zero()) << "[" << c.ci_lo << ", " << c.ci_hi << "]";
  EXPECT_LE(c.ci_lo, known);
  EXPECT_GE(c.ci_hi, known);
  EXPECT_LE(c.boot_lo, known);
  EXPECT_GE(c.boot_hi, known);
  EXPECT_NEAR(c.diff_bits, c.test_bits - c.base_bits, 1e-12);
  EXPECT_LT(c.top1_agreement(), 1.0);  // +1 nat on one entry flips some predictions
  EXPECT_GT(c.top1_agreement(), 0.5);
  std::printf("[figure] known change %.5f bits/token, interval [%.5f, %.5f], top-1 agreement %.3f\n", known, c.ci_lo,
              c.ci_hi, c.top1_agreement());
}

TEST(PairedStats, IntervalCoversAtItsNominalRate) {
  // 400 independent repetitions: a 95% interval must cover the known change ~380 times
  // (binomial sd ~4.4). Tokens are independent here, so this checks the interval's arithmetic
  // (t quantile, sd, pairing), not the choice of the window as the sampling unit.
  int covered = 0;
  const int reps = 400;
  for (int r = 0; r < reps; ++r) {
    std::vector<TokenScores> base, test;
    const double known = make_case(1000 + r, 16, 40, 0.5, base, test);
    const PairedComparison c = compare_paired(base, test, 0.95, 200, r);
    covered += c.ci_lo <= known && known <= c.ci_hi;
  }
  EXPECT_GE(covered, 365);
  EXPECT_LE(covered, 395);
  std::printf("[figure] coverage of the 95%% interval: %d of %d\n", covered, reps);
}

TEST(PairedStats, IdenticalSidesGiveAZeroWidthIntervalAtZero) {
  std::vector<TokenScores> base, test;
  make_case(3, 8, 20, 0.0, base, test);
  const PairedComparison c = compare_paired(base, test);
  EXPECT_EQ(c.diff_bits, 0.0);
  EXPECT_EQ(c.ci_lo, 0.0);
  EXPECT_EQ(c.ci_hi, 0.0);
  EXPECT_EQ(c.top1_agreement(), 1.0);
}

TEST(PairedStats, MismatchedWindowsAreRejected) {
  std::vector<TokenScores> base, test;
  make_case(3, 4, 20, 0.3, base, test);
  test.pop_back();
  EXPECT_THROW(compare_paired(base, test), mla::InputError);
  test = base;
  test[1].nll.pop_back();
  EXPECT_THROW(compare_paired(base, test), mla::InputError);
}

TEST(PairedStats, LossThresholdParsesBitsAndPercent) {
  const LossThreshold a = LossThreshold::parse("0.01");
  EXPECT_TRUE(a.given);
  EXPECT_FALSE(a.relative);
  EXPECT_DOUBLE_EQ(a.bits(2.0), 0.01);
  const LossThreshold b = LossThreshold::parse("0.5%");
  EXPECT_TRUE(b.relative);
  EXPECT_DOUBLE_EQ(b.bits(2.0), 0.01);
  EXPECT_THROW(LossThreshold::parse("abc"), mla::InputError);
  EXPECT_THROW(LossThreshold::parse("1x"), mla::InputError);
  EXPECT_THROW(LossThreshold::parse("%"), mla::InputError);
  PairedComparison c;
  c.base_bits = 2.0;
  c.ci_hi = 0.009;
  EXPECT_TRUE(b.passes(c));
  c.ci_hi = 0.011;
  EXPECT_FALSE(b.passes(c));
  EXPECT_TRUE(LossThreshold{}.passes(c));  // none given
}
