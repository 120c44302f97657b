#include "calibration/stats.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace mla::calib {

void SecondMoment::collect(const MatrixR& u) {
  if (u.rows() == 0) return;
  const int d = static_cast<int>(u.cols());
  // sum += u^T u, lower triangle, through BLAS (row-major: lower of C, A^T A).
  cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, d, static_cast<int>(u.rows()), 1.0, u.data(),
              d, 1.0, sum.data(), d);
  count += u.rows();
}

void SecondMoment::merge(const SecondMoment& o) {
  sum += o.sum;
  count += o.count;
}

MatrixR SecondMoment::finalize() const {
  MatrixR m = sum.triangularView<Eigen::Lower>();
  m.triangularView<Eigen::StrictlyUpper>() = m.transpose().triangularView<Eigen::StrictlyUpper>();
  if (count > 0) m /= static_cast<double>(count);
  return m;
}

int64_t RowReservoir::offer_slot() {
  ++seen;
  int64_t slot = -1;
  if (size() < capacity) {
    slot = size();
    rows.resize(rows.size() + width);
  } else {
    const auto j = static_cast<int64_t>(rng() % static_cast<uint64_t>(seen));
    if (j < capacity) slot = j;
  }
  return slot;
}

void RowReservoir::store(int64_t slot, const double* row) {
  for (int64_t i = 0; i < width; ++i) rows[slot * width + i] = static_cast<float>(row[i]);
}

void RowReservoir::merge(const RowReservoir& o) {
  if (o.seen == 0) return;
  std::vector<float> out;
  const int64_t total = seen + o.seen;
  const int64_t n = std::min<int64_t>(capacity, size() + o.size());
  int64_t ia = 0, ib = 0;
  for (int64_t k = 0; k < n; ++k) {
    const bool take_a = ib >= o.size() ||
                        (ia < size() && static_cast<int64_t>(rng() % total) < seen);
    const auto& src = take_a ? rows : o.rows;
    const int64_t idx = take_a ? ia++ : ib++;
    out.insert(out.end(), src.begin() + idx * width, src.begin() + (idx + 1) * width);
  }
  rows = std::move(out);
  seen = total;
}

double FitSums::r2(double mu) const {
  if (n == 0) return 0.0;
  const double centred = zz - z * z / static_cast<double>(n);
  return centred > 0 ? 1.0 - sse(mu) / centred : 0.0;
}

void ErrorSums::add(const double* y, const double* r, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double e = y[i] - r[i];
    ee += e * e; rr += r[i] * r[i]; yy += y[i] * y[i]; yr += y[i] * r[i];
  }
  n += count;
}
double ErrorSums::rmse() const { return n ? std::sqrt(ee / static_cast<double>(n)) : 0.0; }
double ErrorSums::cos_diff() const {
  if (yy == 0 && rr == 0) return 0.0;
  if (yy == 0 || rr == 0) return 1.0;
  return 1.0 - yr / std::sqrt(yy * rr);
}
double ErrorSums::rel_l2() const { return rr > 0 ? std::sqrt(ee / rr) : (ee > 0 ? INFINITY : 0.0); }

}  // namespace mla::calib
