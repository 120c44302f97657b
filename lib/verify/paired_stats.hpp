#pragma once
// Paired comparison of two models' next-token losses on the SAME tokens (verify-decode's
// end-to-end figure). Both sides score identical windows at identical positions, so the
// per-token differences d = nll_test - nll_base cancel the text's own difficulty, and the
// uncertainty of the mean difference is that of d alone (docs/math.md, "Paired loss comparison").
//
// Sampling unit: the window. Windows are disjoint chunks of held-out text, so their mean
// differences are (close to) independent; tokens inside one window are not (an error early in
// the decode changes the residual stream of every later position), so a per-token interval
// would be too narrow. The interval is the paired Student t-interval on the per-window mean
// differences (n - 1 degrees of freedom): exact for normal window means, and unlike a
// percentile bootstrap it does not under-cover at the 8-32 windows a quick check uses. A
// percentile bootstrap over windows is reported beside it as a cross-check.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/tensor.hpp"

namespace mla::verify {

// Scores of rows t in [from, to - 1) of one window's logits [T, V]: the natural-log NLL of
// tokens[t + 1] and the arg-max (top-1 prediction) of row t.
struct TokenScores {
  std::vector<double> nll;
  std::vector<int32_t> top1;
};
TokenScores score_tokens(const MatrixR& logits, const std::vector<int32_t>& tokens, int64_t from, int64_t to);

// Quantile of Student's t distribution with `df` degrees of freedom (df >= 1; df = 0 is
// treated as infinite). CDF by Simpson integration of the density, inverted by bisection:
// accurate to ~1e-9, enough for an interval.
double student_t_quantile(double p, int64_t df);

struct PairedComparison {
  int64_t windows = 0, tokens = 0;
  double confidence = 0.95;
  // Means per token in bits (nats / ln 2; bits per byte for the byte-level models).
  double base_bits = 0, test_bits = 0;
  double diff_bits = 0;                  // test - base (positive: the test side is worse)
  double window_sd_bits = 0;             // sd of the per-window mean differences
  double ci_lo = 0, ci_hi = 0;           // paired t-interval of diff_bits
  double boot_lo = 0, boot_hi = 0;       // percentile bootstrap over windows (cross-check)
  int64_t top1_agree = 0;                // positions whose top-1 predictions are equal
  double top1_agreement() const { return tokens ? static_cast<double>(top1_agree) / tokens : 0.0; }
  // Interval width relative to the base loss (e.g. 0.002 = 0.2%).
  double relative_width() const { return base_bits > 0 ? (ci_hi - ci_lo) / base_bits : 0.0; }
  bool excludes_zero() const { return ci_lo > 0 || ci_hi < 0; }
};

// base[w], test[w]: the per-token scores of window w on either side (same length per window,
// InputError otherwise). Needs >= 2 windows for an interval (with one, the interval is
// [-inf, +inf]). `bootstrap` resamples, seeded (deterministic).
PairedComparison compare_paired(const std::vector<TokenScores>& base, const std::vector<TokenScores>& test,
                                double confidence = 0.95, int bootstrap = 2000, uint64_t seed = 1);

// --max-loss-increase: an absolute increase in bits per token ("0.01") or a percentage of the
// base loss ("0.5%"). The check passes when the interval's upper end is at or below it: the
// data must show, at the stated confidence, that the loss rose by no more than the threshold.
struct LossThreshold {
  bool given = false;
  double value = 0;       // bits per token, or a fraction of the base loss when relative
  bool relative = false;
  static LossThreshold parse(const std::string& text);  // InputError naming the text
  double bits(double base_bits) const { return relative ? value * base_bits : value; }
  bool passes(const PairedComparison& c) const { return !given || c.ci_hi <= bits(c.base_bits); }
};

nlohmann::json paired_json(const PairedComparison& c);

}  // namespace mla::verify
