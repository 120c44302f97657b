#include "model/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/error.hpp"

namespace mla::model {

namespace {

// 0 finite, 1 NaN, 2 +Inf, 3 -Inf: positions must agree in kind, not only in finiteness.
int nonfinite_kind(double v) {
  if (std::isnan(v)) return 1;
  if (std::isinf(v)) return v > 0 ? 2 : 3;
  return 0;
}

template <typename Y>
ErrorMetrics compare_impl(std::span<const Y> y, std::span<const double> r) {
  if (y.size() != r.size()) {
    throw InputError("compare: output has " + std::to_string(y.size()) +
                     " elements but the reference has " + std::to_string(r.size()));
  }
  ErrorMetrics m;
  m.count = static_cast<int64_t>(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const int ky = nonfinite_kind(static_cast<double>(y[i]));
    const int kr = nonfinite_kind(r[i]);
    if (ky != kr) {
      m.nonfinite_match = false;
      m.nonfinite_mismatch = static_cast<int64_t>(i);
      m.worst_index = static_cast<int64_t>(i);
      m.worst_value = static_cast<double>(y[i]);
      m.worst_reference = r[i];
      const double nan = std::numeric_limits<double>::quiet_NaN();
      m.rmse = m.cos_diff = m.rel_l2 = m.max_abs = nan;
      return m;
    }
    if (ky != 0) ++m.nonfinite_count;
  }
  double sum_sq_err = 0.0, yy = 0.0, rr = 0.0, yr = 0.0;
  int64_t n = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double yi = static_cast<double>(y[i]);
    const double ri = r[i];
    if (nonfinite_kind(ri) != 0) continue;
    const double d = yi - ri;
    sum_sq_err += d * d;
    yy += yi * yi;
    rr += ri * ri;
    yr += yi * ri;
    ++n;
    if (m.worst_index < 0 || std::abs(d) > m.max_abs) {
      m.max_abs = std::abs(d);
      m.worst_index = static_cast<int64_t>(i);
      m.worst_value = yi;
      m.worst_reference = ri;
    }
  }
  if (n == 0) return m;
  m.rmse = std::sqrt(sum_sq_err / static_cast<double>(n));
  if (yy == 0.0 && rr == 0.0) {
    m.cos_diff = 0.0;
  } else if (yy == 0.0 || rr == 0.0) {
    m.cos_diff = 1.0;
  } else {
    m.cos_diff = 1.0 - yr / (std::sqrt(yy) * std::sqrt(rr));
  }
  if (rr == 0.0) {
    m.rel_l2 = sum_sq_err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  } else {
    m.rel_l2 = std::sqrt(sum_sq_err) / std::sqrt(rr);
  }
  return m;
}

}  // namespace

std::string ErrorMetrics::summary() const {
  char buf[320];
  if (!nonfinite_match) {
    std::snprintf(buf, sizeof buf,
                  "n=%lld NaN/Inf positions differ: first at [%lld] (y=%g vs ref=%g)",
                  static_cast<long long>(count), static_cast<long long>(nonfinite_mismatch),
                  worst_value, worst_reference);
  } else {
    std::snprintf(buf, sizeof buf,
                  "n=%lld rmse=%.3e cos_diff=%.3e rel_l2=%.3e max_abs=%.3e at [%lld] "
                  "(y=%.9g vs ref=%.9g)",
                  static_cast<long long>(count), rmse, cos_diff, rel_l2, max_abs,
                  static_cast<long long>(worst_index), worst_value, worst_reference);
  }
  return buf;
}

ErrorMetrics compare(std::span<const double> y, std::span<const double> r) {
  return compare_impl<double>(y, r);
}
ErrorMetrics compare(std::span<const float> y, std::span<const double> r) {
  return compare_impl<float>(y, r);
}

}  // namespace mla::model
