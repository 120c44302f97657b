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

void SecondMoment::collect_f(const float* u, int64_t rows) {
  if (rows <= 0) return;
  const int d = static_cast<int>(sum.cols());
  thread_local std::vector<float> blk;  // one [d, d] block sum per thread, reused
  blk.resize(static_cast<std::size_t>(d) * d);
  for (int64_t r0 = 0; r0 < rows; r0 += kFloatBlock) {
    const int n = static_cast<int>(std::min<int64_t>(kFloatBlock, rows - r0));
    cblas_ssyrk(CblasRowMajor, CblasLower, CblasTrans, d, n, 1.0f, u + r0 * d, d, 0.0f, blk.data(), d);
    for (int i = 0; i < d; ++i) {
      double* dst = sum.data() + static_cast<std::ptrdiff_t>(i) * d;
      const float* src = blk.data() + static_cast<std::ptrdiff_t>(i) * d;
      for (int j = 0; j <= i; ++j) dst[j] += static_cast<double>(src[j]);
    }
  }
  count += rows;
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
  const int64_t na_have = size(), nb_have = o.size();
  const int64_t n = std::min<int64_t>(capacity, na_have + nb_have);
  // How many rows come from each side: n draws without replacement from the union of the two
  // streams (seen and o.seen rows), i.e. a hypergeometric split; capped by what each side kept.
  int64_t ra = seen, rb = o.seen, na = 0, nb = 0;
  for (int64_t k = 0; k < n; ++k) {
    bool take_a;
    if (na == na_have) take_a = false;
    else if (nb == nb_have) take_a = true;
    else take_a = static_cast<int64_t>(rng() % static_cast<uint64_t>(ra + rb)) < ra;
    if (take_a) { ++na; --ra; } else { ++nb; --rb; }
  }
  // Which rows: a uniform subset of each side's slots (partial Fisher-Yates). Slots are not
  // exchangeable by position (early slots of a barely-full reservoir hold early rows), so a
  // prefix would bias the sample.
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(n * width));
  auto pick = [&](const std::vector<float>& src, int64_t have, int64_t take) {
    std::vector<int64_t> idx(static_cast<std::size_t>(have));
    for (int64_t i = 0; i < have; ++i) idx[i] = i;
    for (int64_t i = 0; i < take; ++i) {
      const int64_t j = i + static_cast<int64_t>(rng() % static_cast<uint64_t>(have - i));
      std::swap(idx[i], idx[j]);
      out.insert(out.end(), src.begin() + idx[i] * width, src.begin() + (idx[i] + 1) * width);
    }
  };
  pick(rows, na_have, na);
  pick(o.rows, nb_have, nb);
  rows = std::move(out);
  seen += o.seen;
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
