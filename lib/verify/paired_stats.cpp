#include "verify/paired_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "core/error.hpp"

namespace mla::verify {

TokenScores score_tokens(const MatrixR& logits, const std::vector<int32_t>& tokens, int64_t from, int64_t to) {
  if (from < 0 || to > logits.rows() || to > static_cast<int64_t>(tokens.size()))
    throw InputError("score_tokens: rows [" + std::to_string(from) + ", " + std::to_string(to) + ") outside " +
                     std::to_string(logits.rows()) + " logit rows / " + std::to_string(tokens.size()) + " tokens");
  TokenScores s;
  for (int64_t t = from; t + 1 < to; ++t) {
    Eigen::Index arg = 0;
    const double m = logits.row(t).maxCoeff(&arg);
    const double lse = m + std::log((logits.row(t).array() - m).exp().sum());
    s.nll.push_back(lse - logits(t, tokens[static_cast<std::size_t>(t + 1)]));
    s.top1.push_back(static_cast<int32_t>(arg));
  }
  return s;
}

namespace {

// P(T <= x) for x >= 0: 1/2 plus the density's integral over [0, x] (composite Simpson,
// step <= 1/200: the density is smooth, so the error is ~1e-10).
double t_cdf_upper_half(double x, double nu) {
  const double log_c = std::lgamma((nu + 1) / 2) - std::lgamma(nu / 2) - 0.5 * std::log(nu * M_PI);
  auto density = [&](double v) { return std::exp(log_c - (nu + 1) / 2 * std::log1p(v * v / nu)); };
  const int n = 2 * static_cast<int>(std::ceil(100 * (1 + x)));
  const double h = x / n;
  double s = density(0) + density(x);
  for (int i = 1; i < n; ++i) s += (i % 2 ? 4 : 2) * density(i * h);
  return 0.5 + s * h / 3;
}

double normal_quantile(double p) {
  // Bisection on the normal CDF (erfc), enough for the df = infinity case.
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

double student_t_quantile(double p, int64_t df) {
  if (!(p > 0 && p < 1)) throw InputError("student_t_quantile: p = " + std::to_string(p) + " outside (0, 1)");
  if (df <= 0) return normal_quantile(p);
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  const double nu = static_cast<double>(df);
  double hi = 1;
  while (t_cdf_upper_half(hi, nu) < p) hi *= 2;
  double lo = 0;
  for (int i = 0; i < 60 && hi - lo > 1e-10 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (t_cdf_upper_half(mid, nu) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

PairedComparison compare_paired(const std::vector<TokenScores>& base, const std::vector<TokenScores>& test,
                                double confidence, int bootstrap, uint64_t seed) {
  if (base.size() != test.size())
    throw InputError("compare_paired: " + std::to_string(base.size()) + " base windows vs " +
                     std::to_string(test.size()) + " test windows");
  if (!(confidence > 0 && confidence < 1))
    throw InputError("compare_paired: confidence " + std::to_string(confidence) + " outside (0, 1)");
  const double bits = 1.0 / std::log(2.0);
  PairedComparison c;
  c.confidence = confidence;
  c.windows = static_cast<int64_t>(base.size());
  std::vector<double> d(base.size());  // per-window mean difference, bits per token
  double sum_base = 0, sum_test = 0;
  for (std::size_t w = 0; w < base.size(); ++w) {
    const auto& b = base[w];
    const auto& t = test[w];
    if (b.nll.size() != t.nll.size() || b.top1.size() != b.nll.size() || t.top1.size() != t.nll.size() ||
        b.nll.empty())
      throw InputError("compare_paired: window " + std::to_string(w) + " scores " + std::to_string(b.nll.size()) +
                       " base and " + std::to_string(t.nll.size()) + " test tokens (must be equal and > 0)");
    if (w > 0 && b.nll.size() != base[0].nll.size())
      throw InputError("compare_paired: window " + std::to_string(w) + " has " + std::to_string(b.nll.size()) +
                       " tokens, window 0 has " + std::to_string(base[0].nll.size()) + " (windows must be equal)");
    double s = 0;
    for (std::size_t i = 0; i < b.nll.size(); ++i) {
      s += t.nll[i] - b.nll[i];
      sum_base += b.nll[i];
      sum_test += t.nll[i];
      c.top1_agree += b.top1[i] == t.top1[i];
    }
    c.tokens += static_cast<int64_t>(b.nll.size());
    d[w] = s / static_cast<double>(b.nll.size()) * bits;
  }
  if (c.windows == 0) return c;
  c.base_bits = sum_base / static_cast<double>(c.tokens) * bits;
  c.test_bits = sum_test / static_cast<double>(c.tokens) * bits;
  double mean = 0;
  for (double v : d) mean += v;
  mean /= static_cast<double>(d.size());
  c.diff_bits = mean;
  const double inf = std::numeric_limits<double>::infinity();
  if (c.windows < 2) {
    c.ci_lo = c.boot_lo = -inf;
    c.ci_hi = c.boot_hi = inf;
    return c;
  }
  double ss = 0;
  for (double v : d) ss += (v - mean) * (v - mean);
  c.window_sd_bits = std::sqrt(ss / static_cast<double>(d.size() - 1));
  const double tq = student_t_quantile(0.5 + confidence / 2, c.windows - 1);
  const double half = tq * c.window_sd_bits / std::sqrt(static_cast<double>(c.windows));
  c.ci_lo = mean - half;
  c.ci_hi = mean + half;
  // Percentile bootstrap over windows.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, d.size() - 1);
  std::vector<double> means(static_cast<std::size_t>(std::max(bootstrap, 1)));
  for (auto& m : means) {
    double s = 0;
    for (std::size_t i = 0; i < d.size(); ++i) s += d[pick(rng)];
    m = s / static_cast<double>(d.size());
  }
  std::sort(means.begin(), means.end());
  auto at = [&](double q) {
    const auto i = static_cast<std::size_t>(std::clamp(q * static_cast<double>(means.size() - 1), 0.0,
                                                        static_cast<double>(means.size() - 1)));
    return means[i];
  };
  c.boot_lo = at((1 - confidence) / 2);
  c.boot_hi = at(1 - (1 - confidence) / 2);
  return c;
}

LossThreshold LossThreshold::parse(const std::string& text) {
  LossThreshold t;
  std::string s = text;
  if (!s.empty() && s.back() == '%') {
    t.relative = true;
    s.pop_back();
  }
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || !std::isfinite(v))
    throw InputError("--max-loss-increase: '" + text + "' is not a number of bits per token (0.01) or a percentage "
                     "of the original loss (0.5%)");
  t.given = true;
  t.value = t.relative ? v / 100.0 : v;
  return t;
}

nlohmann::json paired_json(const PairedComparison& c) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"windows", c.windows},
          {"tokens", c.tokens},
          {"confidence", c.confidence},
          {"original_bits_per_token", c.base_bits},
          {"converted_bits_per_token", c.test_bits},
          {"difference_bits_per_token", c.diff_bits},
          {"interval", {{"method", "paired Student t over per-window mean differences"}, {"lo", num(c.ci_lo)},
                        {"hi", num(c.ci_hi)}}},
          {"bootstrap_interval", {{"method", "percentile bootstrap over windows"}, {"lo", num(c.boot_lo)},
                                  {"hi", num(c.boot_hi)}}},
          {"window_sd_bits", c.window_sd_bits},
          {"relative_width", c.relative_width()},
          {"excludes_zero", c.excludes_zero()},
          {"top1_agreement", c.top1_agreement()},
          {"top1_agree", c.top1_agree}};
}

}  // namespace mla::verify
