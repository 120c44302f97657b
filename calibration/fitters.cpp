#include "calibration/fitters.hpp"

#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "calibration/stats.hpp"
#include "core/error.hpp"

namespace mla::calib {

Eigen_ symmetric_eigen(const MatrixR& m) {
  const lapack_int n = static_cast<lapack_int>(m.rows());
  Eigen::MatrixXd a = m;  // column-major copy; LAPACK overwrites it with eigenvectors
  VectorD w(n);
  const lapack_int info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', n, a.data(), n, w.data());
  if (info != 0) throw Error("LAPACKE_dsyevd failed with info " + std::to_string(info));
  Eigen_ r;
  r.values = w.reverse();
  r.vectors = a.rowwise().reverse();
  for (Eigen::Index j = 0; j < n; ++j) {
    Eigen::Index imax = 0;
    r.vectors.col(j).cwiseAbs().maxCoeff(&imax);
    if (r.vectors(imax, j) < 0) r.vectors.col(j) *= -1.0;
  }
  return r;
}

std::vector<double> energy_fractions(const MatrixR& m, const Eigen::MatrixXd& u, int g) {
  const Eigen::Index d = m.rows(), w = d / g;
  const double tr = m.trace();
  std::vector<double> f(g, 0.0);
  if (tr <= 0) return f;
  for (int k = 0; k < g; ++k) {
    const auto uk = u.middleCols(k * w, w);
    // M is positive semi-definite, so f_k >= 0; an empty slice (rank-deficient M, e.g. layer 0
    // of tiny-v2) comes out as -1e-17 from rounding, which mla-convert rightly refuses.
    f[k] = std::max(0.0, (uk.transpose() * m * uk).trace() / tr);
  }
  return f;
}

MuFit fit_mu(const FitSums& s, double min_rel_energy) {
  MuFit r;
  if (s.n == 0 || s.pp <= min_rel_energy * s.zz || s.pp <= 0) {
    r.guarded = true;
    return r;
  }
  r.mu = s.zp / s.pp;
  return r;
}

double fp4_round_mse(const std::vector<float>& x, double c) {
  return quant::fp4_mx_sq_error(x.data(), x.size(), quant::Fp4ScaleRule::Round,
                                static_cast<float>(c)) / static_cast<double>(x.size());
}

namespace {
// Minimises f on [lo, hi] (log-spaced grid, then golden section around the best point).
// The rounded objective is piecewise constant in c, so the grid does the real work; golden
// section only polishes inside the best cell.
double minimise_1d(const std::function<double(double)>& f, double lo, double hi, int grid) {
  double best_c = lo, best = INFINITY;
  const double r = std::log(hi / lo);
  for (int i = 0; i <= grid; ++i) {
    const double c = lo * std::exp(r * i / grid);
    const double v = f(c);
    if (v < best) { best = v; best_c = c; }
  }
  double a = best_c * std::exp(-r / grid), b = best_c * std::exp(r / grid);
  const double phi = 0.5 * (std::sqrt(5.0) - 1.0);
  double x1 = b - phi * (b - a), x2 = a + phi * (b - a), f1 = f(x1), f2 = f(x2);
  for (int it = 0; it < 30; ++it) {
    if (f1 <= f2) { b = x2; x2 = x1; f2 = f1; x1 = b - phi * (b - a); f1 = f(x1); }
    else { a = x1; x1 = x2; f1 = f2; x2 = a + phi * (b - a); f2 = f(x2); }
  }
  const double c_mid = f1 <= f2 ? x1 : x2;
  return f(c_mid) < best ? c_mid : best_c;
}
}  // namespace

Fp4ConstantFit fit_fp4_constant(const std::vector<float>& x, double c_lo, double c_hi) {
  if (x.empty() || x.size() % quant::kFp4Group != 0) {
    throw InputError("FP4 constant fit: sample size " + std::to_string(x.size()) +
                     " is empty or not a multiple of 32");
  }
  Fp4ConstantFit r;
  const double n = static_cast<double>(x.size());
  r.values = static_cast<int64_t>(x.size());
  for (float v : x) r.mean_square += static_cast<double>(v) * v;
  r.mean_square /= n;
  auto cont = [&](double c) { return quant::fp4_continuous_sq_error(x.data(), x.size(), c) / n; };
  auto rnd = [&](double c) { return fp4_round_mse(x, c); };
  r.c_continuous = minimise_1d(cont, c_lo, c_hi, 96);
  r.mse_continuous = cont(r.c_continuous);
  r.c_rounded = minimise_1d(rnd, c_lo, c_hi, 96);
  r.mse_rounded = rnd(r.c_rounded);
  r.mse_rounded_paper = rnd(quant::kUltraQuantC);
  r.mse_ocp_floor = quant::fp4_mx_sq_error(x.data(), x.size(), quant::Fp4ScaleRule::OcpFloor, 0) / n;
  r.mse_rceil = quant::fp4_mx_sq_error(x.data(), x.size(), quant::Fp4ScaleRule::Rceil, 0) / n;
  r.mse_nvfp4 = quant::nvfp4_sq_error(x.data(), x.size()) / n;
  r.mse_int4 = quant::int4_group_sq_error(x.data(), x.size()) / n;
  return r;
}

}  // namespace mla::calib
