// Shared-prefix (TyphoonMLA) CPU twins: decompress, naive prefix attention, merge and the whole
// mixed step against the float64 reference, and mixed = absorb-only on the same inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "model/metrics.hpp"
#include "prefix_case.hpp"
#include "quant/prefix_twin_bf16.hpp"

namespace mla::test {
namespace {

struct RunResult {
  model::ErrorMetrics out;
  double lse_max_abs = 0;
  std::vector<uint16_t> bits;
};

RunResult check_against_reference(const PrefixCase& c, const PrefixReference& ref) {
  RunResult r;
  r.out = model::compare(bf16_to_doubles(c.out), ref.out);
  for (size_t i = 0; i < c.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      EXPECT_TRUE(std::isinf(c.lse[i]) && c.lse[i] < 0) << "lse[" << i << "] = " << c.lse[i] << ", reference -inf";
      continue;
    }
    r.lse_max_abs = std::max(r.lse_max_abs, std::abs(double(c.lse[i]) - ref.lse[i]));
  }
  r.bits = c.out;
  return r;
}

// Runs the mixed path (b_theta 0) and the absorb-only fallback (b_theta above the batch) on one
// case; both against float64, and against each other.
void run_case(PrefixCase c, int splits = 0) {
  quant::prefix_decompress_twin_bf16(c.decompress_params());
  const PrefixReference ref = reference_prefix_decode(c);

  quant::mixed_decode_twin_bf16(c.mixed_params(0.0, splits));
  const RunResult mixed = check_against_reference(c, ref);
  SCOPED_TRACE("mixed: " + mixed.out.summary());
  EXPECT_TRUE(mixed.out.nonfinite_match);
  EXPECT_LT(mixed.out.rel_l2, kPrefixRelL2Tol);
  EXPECT_LT(mixed.out.cos_diff, kPrefixCosDiffTol);
  EXPECT_LT(mixed.lse_max_abs, kPrefixLseAbsTol);

  c.reset_outputs();
  quant::mixed_decode_twin_bf16(c.mixed_params(c.batch + 1.0));
  const RunResult absorb = check_against_reference(c, ref);
  SCOPED_TRACE("absorb-only: " + absorb.out.summary());
  EXPECT_TRUE(absorb.out.nonfinite_match);
  EXPECT_LT(absorb.out.rel_l2, kPrefixRelL2Tol);
  EXPECT_LT(absorb.out.cos_diff, kPrefixCosDiffTol);
  EXPECT_LT(absorb.lse_max_abs, kPrefixLseAbsTol);

  const auto diff = model::compare(bf16_to_doubles(mixed.bits), bf16_to_doubles(absorb.bits));
  SCOPED_TRACE("mixed vs absorb-only: " + diff.summary());
  EXPECT_LT(diff.rel_l2, kMixedVsAbsorbRelL2Tol);
  EXPECT_GT(diff.rel_l2, 0.0) << "the two paths round differently; identical bits mean one path did not run";
}

TEST(PrefixTwin, KimiHeadDimsPrefixEndsMidPage) {
  // 150 = 2 pages of 64 + 22: the prefix ends mid-page; own lengths span 0..3 pages.
  run_case(make_prefix_case(150, {1, 70, 130}, 1, 8, true, 64, 11));
}

TEST(PrefixTwin, TinyDimsMtpSq2) {
  // s_q = 2: the first query token sees one own token fewer (own length 1: none), both see the prefix.
  run_case(make_prefix_case(128, {2, 1, 65, 129}, 2, 8, false, 64, 12));
}

TEST(PrefixTwin, PrefixOfOneToken) { run_case(make_prefix_case(1, {3, 64, 200}, 1, 8, false, 64, 13)); }

TEST(PrefixTwin, SuffixOfZeroTokens) {
  // Request 0 has no own token: its absorbed part has lse = -inf and weight 0 in the merge.
  run_case(make_prefix_case(96, {0, 5, 0}, 1, 4, true, 128, 14));
}

TEST(PrefixTwin, ManySplitsIncludingEmptyOnes) {
  // 5 tiles in 7 splits: the last two runs have no token (lse -inf, weight 0).
  run_case(make_prefix_case(300, {17, 33}, 1, 4, false, 64, 15), 7);
}

TEST(PrefixTwin, FallbackBelowThresholdNeverTouchesThePrefix) {
  PrefixCase c = make_prefix_case(80, {4, 9}, 1, 4, false, 64, 16);
  quant::MixedDecodeParams p = c.mixed_params(3.0);  // B = 2 < 3: absorb only
  p.prefix_k = nullptr;
  p.prefix_v = nullptr;
  EXPECT_FALSE(quant::mixed_uses_prefix(p));
  EXPECT_NO_THROW(quant::mixed_decode_twin_bf16(p));
  const auto m = model::compare(bf16_to_doubles(c.out), reference_prefix_decode(c).out);
  EXPECT_LT(m.rel_l2, kPrefixRelL2Tol) << m.summary();
}

TEST(PrefixTwin, AboveThresholdNeverTouchesTheFullView) {
  PrefixCase c = make_prefix_case(80, {4, 9, 1}, 1, 4, false, 64, 17);
  quant::prefix_decompress_twin_bf16(c.decompress_params());
  quant::MixedDecodeParams p = c.mixed_params(3.0);  // B = 3 >= 3: mixed
  p.full = quant::Bf16DecodeParams{};                 // invalid: must not be used
  EXPECT_TRUE(quant::mixed_uses_prefix(p));
  EXPECT_NO_THROW(quant::mixed_decode_twin_bf16(p));
  const auto m = model::compare(bf16_to_doubles(c.out), reference_prefix_decode(c).out);
  EXPECT_LT(m.rel_l2, kPrefixRelL2Tol) << m.summary();
}

TEST(PrefixTwin, DecompressMatchesFloat64) {
  PrefixCase c = make_prefix_case(70, {1}, 1, 3, true, 64, 18);
  quant::prefix_decompress_twin_bf16(c.decompress_params());
  // K[j,h,:d_n] = W_UK x, V = W_UV x (each rounded once to bf16), K[j,h,d_n:] = k_pe bits.
  double worst = 0;
  for (int j = 0; j < c.prefix_len; ++j)
    for (int h = 0; h < c.heads; ++h) {
      const uint16_t* x = c.prefix_rows.data() + size_t(j) * c.dim();
      for (int n = 0; n < c.d_n + c.d_v; ++n) {
        double s = 0;
        for (int i = 0; i < c.d_c; ++i)
          s += double(bf16_to_float(c.kv_b[(size_t(h) * (c.d_n + c.d_v) + n) * c.d_c + i])) * bf16_to_float(x[i]);
        const uint16_t got = n < c.d_n ? c.k[(size_t(j) * c.heads + h) * c.dqk() + n]
                                       : c.v[(size_t(j) * c.heads + h) * c.d_v + n - c.d_n];
        worst = std::max(worst, std::abs(bf16_to_float(got) - s) / std::max(std::abs(s), 1e-3));
      }
      for (int i = 0; i < c.d_r; ++i)
        ASSERT_EQ(c.k[(size_t(j) * c.heads + h) * c.dqk() + c.d_n + i], x[c.d_c + i]);
    }
  EXPECT_LT(worst, 1.0 / 256 + 1e-4);  // one bf16 rounding (fp32 sums of 512 terms add ~1e-6)
}

TEST(PrefixTwin, BadParamsNameTheField) {
  PrefixCase c = make_prefix_case(10, {2}, 1, 2, false, 64, 19);
  auto p = c.decompress_params();
  p.d_v = 96;
  try {
    quant::prefix_decompress_twin_bf16(p);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("d_v"), std::string::npos) << e.what();
  }
  auto a = c.mixed_params(0.0);
  a.prefix_len = 0;
  EXPECT_THROW(quant::mixed_decode_twin_bf16(a), InputError);
  c.prefix_table[0] = 9999;
  p = c.decompress_params();
  EXPECT_THROW(quant::prefix_decompress_twin_bf16(p), InputError);
}

TEST(PrefixTwin, DefaultSplitsFillTheDevice) {
  // H = 64, B = 512: 4 row blocks x 64 heads = 256 CTAs on 132 SMs: 2 waves at 97%.
  EXPECT_EQ(quant::prefix_default_splits(512, 64, 26472, 132), 1);
  // B = 64: 64 CTAs; 2 splits fill 128 of 132 SMs.
  EXPECT_EQ(quant::prefix_default_splits(64, 64, 26472, 132), 2);
  // Never more splits than tiles.
  EXPECT_EQ(quant::prefix_default_splits(1, 1, 100, 132), 2);
}

}  // namespace
}  // namespace mla::test
