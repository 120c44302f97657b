#include "quant/codebook.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace mla::quant {

namespace {

// Cumulative mass / first / second moment as functions of a threshold.
struct Cumulative {
  virtual ~Cumulative() = default;
  // {P, M, S} of the data below t.
  virtual void below(double t, double& p, double& m, double& s) const = 0;
  virtual double lo() const = 0;
  virtual double hi() const = 0;
  // The q-quantile (initialisation).
  virtual double quantile(double q) const = 0;
};

struct SampleCumulative final : Cumulative {
  std::vector<double> x, cp, cm, cs;  // sorted samples; prefix sums with a leading 0
  explicit SampleCumulative(std::vector<double> v) : x(std::move(v)) {
    std::sort(x.begin(), x.end());
    cp.resize(x.size() + 1); cm.resize(x.size() + 1); cs.resize(x.size() + 1);
    cp[0] = cm[0] = cs[0] = 0.0;
    // Kahan-free but in float64: 1M terms of O(1) lose ~1e-10 relative, far below tolerance.
    for (std::size_t i = 0; i < x.size(); ++i) {
      cp[i + 1] = static_cast<double>(i + 1);
      cm[i + 1] = cm[i] + x[i];
      cs[i + 1] = cs[i] + x[i] * x[i];
    }
  }
  void below(double t, double& p, double& m, double& s) const override {
    const std::size_t k = std::lower_bound(x.begin(), x.end(), t) - x.begin();
    p = cp[k]; m = cm[k]; s = cs[k];
  }
  double lo() const override { return x.front(); }
  double hi() const override { return x.back(); }
  double quantile(double q) const override {
    const std::size_t k = std::min(x.size() - 1, static_cast<std::size_t>(q * x.size()));
    return x[k];
  }
};

struct DensityCumulative final : Cumulative {
  double a, b, h;
  std::vector<double> cp, cm, cs;
  DensityCumulative(const std::function<double(double)>& pdf, double lo_, double hi_, std::size_t n)
      : a(lo_), b(hi_), h((hi_ - lo_) / static_cast<double>(n - 1)), cp(n), cm(n), cs(n) {
    double f_prev = pdf(a);
    cp[0] = cm[0] = cs[0] = 0.0;
    for (std::size_t i = 1; i < n; ++i) {
      const double x0 = a + h * static_cast<double>(i - 1), x1 = a + h * static_cast<double>(i);
      const double f = pdf(x1);
      cp[i] = cp[i - 1] + 0.5 * h * (f_prev + f);
      cm[i] = cm[i - 1] + 0.5 * h * (f_prev * x0 + f * x1);
      cs[i] = cs[i - 1] + 0.5 * h * (f_prev * x0 * x0 + f * x1 * x1);
      f_prev = f;
    }
  }
  static double interp(const std::vector<double>& c, double u) {
    const std::size_t i = std::min(c.size() - 2, static_cast<std::size_t>(u));
    const double w = u - static_cast<double>(i);
    return c[i] * (1.0 - w) + c[i + 1] * w;
  }
  void below(double t, double& p, double& m, double& s) const override {
    const double u = std::clamp((t - a) / h, 0.0, static_cast<double>(cp.size() - 1));
    p = interp(cp, u); m = interp(cm, u); s = interp(cs, u);
  }
  double lo() const override { return a; }
  double hi() const override { return b; }
  double quantile(double q) const override {
    const double target = q * cp.back();
    const std::size_t k = std::lower_bound(cp.begin(), cp.end(), target) - cp.begin();
    return a + h * static_cast<double>(std::min(k, cp.size() - 1));
  }
};

Codebook run_lloyd(const Cumulative& cum, const LloydOptions& opt) {
  const int L = opt.levels;
  if (L < 2) throw InputError("Lloyd-Max: levels must be >= 2, got " + std::to_string(L));
  double p_tot, m_tot, s_tot;
  cum.below(std::numeric_limits<double>::infinity(), p_tot, m_tot, s_tot);
  Codebook cb;
  cb.levels.resize(L);
  for (int i = 0; i < L; ++i) cb.levels[i] = cum.quantile((i + 0.5) / L);
  std::vector<double> edge(L + 1);
  auto interval_moments = [&](int i, double& p, double& m, double& s) {
    double p0, m0, s0, p1, m1, s1;
    if (i == 0) { p0 = m0 = s0 = 0.0; } else { cum.below(edge[i], p0, m0, s0); }
    if (i == L - 1) { p1 = p_tot; m1 = m_tot; s1 = s_tot; } else { cum.below(edge[i + 1], p1, m1, s1); }
    p = p1 - p0; m = m1 - m0; s = s1 - s0;
  };
  for (cb.iterations = 1; cb.iterations <= opt.max_iterations; ++cb.iterations) {
    for (int i = 1; i < L; ++i) edge[i] = 0.5 * (cb.levels[i - 1] + cb.levels[i]);
    double moved = 0.0;
    for (int i = 0; i < L; ++i) {
      double p, m, s;
      interval_moments(i, p, m, s);
      if (p <= 0.0) continue;  // empty cell keeps its level
      const double c = m / p;
      moved = std::max(moved, std::fabs(c - cb.levels[i]));
      cb.levels[i] = c;
    }
    std::sort(cb.levels.begin(), cb.levels.end());
    if (moved < opt.tolerance) { cb.converged = true; break; }
  }
  cb.iterations = std::min(cb.iterations, opt.max_iterations);
  for (int i = 1; i < L; ++i) edge[i] = 0.5 * (cb.levels[i - 1] + cb.levels[i]);
  double err = 0.0;
  for (int i = 0; i < L; ++i) {
    double p, m, s;
    interval_moments(i, p, m, s);
    const double c = cb.levels[i];
    err += s - 2.0 * c * m + c * c * p;
  }
  cb.mse = std::max(0.0, err / p_tot);
  return cb;
}

}  // namespace

Codebook lloyd_max_samples(std::vector<double> samples, const LloydOptions& opt) {
  if (samples.empty()) throw InputError("Lloyd-Max: empty sample");
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i]))
      throw InputError("Lloyd-Max: sample " + std::to_string(i) + " is not finite");
  }
  return run_lloyd(SampleCumulative(std::move(samples)), opt);
}

Codebook lloyd_max_density(const std::function<double(double)>& pdf, double lo, double hi,
                           const LloydOptions& opt, std::size_t grid) {
  if (!(hi > lo) || grid < 3) throw InputError("Lloyd-Max: bad density support or grid");
  return run_lloyd(DensityCumulative(pdf, lo, hi, grid), opt);
}

Codebook lloyd_max_gaussian(double sigma, const LloydOptions& opt) {
  return lloyd_max_density([sigma](double x) { return std::exp(-0.5 * (x / sigma) * (x / sigma)); },
                           -9.0 * sigma, 9.0 * sigma, opt);
}

Codebook lloyd_max_sphere_coordinate(int d, const LloydOptions& opt) {
  if (d < 3) throw InputError("Lloyd-Max: sphere dimension must be >= 3, got " + std::to_string(d));
  const double k = 0.5 * (d - 3);
  return lloyd_max_density([k](double x) { return std::pow(std::max(0.0, 1.0 - x * x), k); }, -1.0,
                           1.0, opt);
}

int nearest_level(const std::vector<double>& levels, double v) {
  // First level >= v; compare with its left neighbour (ties to the lower one).
  const auto it = std::lower_bound(levels.begin(), levels.end(), v);
  if (it == levels.begin()) return 0;
  if (it == levels.end()) return static_cast<int>(levels.size()) - 1;
  const int i = static_cast<int>(it - levels.begin());
  return (v - levels[i - 1] <= levels[i] - v) ? i - 1 : i;
}

double codebook_mse(const std::vector<double>& levels, const std::vector<double>& samples) {
  if (samples.empty()) return 0.0;
  double err = 0.0;
  for (double v : samples) {
    const double d = v - levels[nearest_level(levels, v)];
    err += d * d;
  }
  return err / static_cast<double>(samples.size());
}

}  // namespace mla::quant
