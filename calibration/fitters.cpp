#include "calibration/fitters.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>

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

VectorD basis_energies(const MatrixR& m, const Eigen::MatrixXd& u) {
  const int d = static_cast<int>(m.rows());
  // MU = M U (M symmetric: its row-major storage is its column-major storage), then
  // e_i = u_i . (M u_i).
  Eigen::MatrixXd mu(d, d);
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, d, d, d, 1.0, m.data(), d, u.data(), d, 0.0,
              mu.data(), d);
  VectorD e(d);
  for (int i = 0; i < d; ++i) e(i) = u.col(i).dot(mu.col(i));
  return e;
}

std::vector<double> energy_fractions_from(const VectorD& e, double tr, int g) {
  const Eigen::Index d = e.size(), w = d / g;
  std::vector<double> f(g, 0.0);
  if (tr <= 0) return f;
  for (int k = 0; k < g; ++k) {
    // M is positive semi-definite, so f_k >= 0; an empty slice (rank-deficient M, e.g. layer 0
    // of tiny-v2) comes out as -1e-17 from rounding, which mla-convert rightly refuses.
    f[k] = std::max(0.0, e.segment(k * w, w).sum() / tr);
  }
  return f;
}

std::vector<double> energy_fractions(const MatrixR& m, const Eigen::MatrixXd& u, int g) {
  return energy_fractions_from(basis_energies(m, u), m.trace(), g);
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

namespace {
// quant's e2m1_round (fp4_kv.cpp) without branches: nearest E2M1 magnitude of |float(v)|,
// ties as there (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
inline double e2m1_round_nb(double v) {
  const double a = std::fabs(static_cast<float>(v));
  const double q = 0.5 * ((a > 0.25) + (a >= 0.75) + (a > 1.25) + (a >= 1.75)) +
                   ((a > 2.5) + (a >= 3.5)) + 2.0 * (a > 5.0);
  return std::copysign(q, v);
}
inline float absmax32(const float* x) {
  float m = 0.0f;
  for (std::size_t i = 0; i < quant::kFp4Group; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}
}  // namespace

// Both sums: per group of 32, eight interleaved partial sums (vectorisable; fixed order, so
// deterministic), groups added in order. Same per-value arithmetic as quant's functions.
double fp4_round_sq_error(const float* x, std::size_t n, float c) {
  double err = 0.0;
  for (std::size_t g = 0; g < n / quant::kFp4Group; ++g) {
    const float* xg = x + g * quant::kFp4Group;
    const uint8_t b = quant::fp4_scale_byte(absmax32(xg), quant::Fp4ScaleRule::Round, c);
    const int e = static_cast<int>(b) - 127;
    const double down = std::ldexp(1.0, -e), up = b == 0 ? 0.0 : std::ldexp(1.0, e);  // exact powers of two
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < quant::kFp4Group; i += 8)
      for (std::size_t j = 0; j < 8; ++j) {
        const double v = xg[i + j];
        const double y = e2m1_round_nb(v * down) * up;
        acc[j] += (y - v) * (y - v);
      }
    err += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  return err;
}

double fp4_continuous_sq_error_fast(const float* x, std::size_t n, double c) {
  double err = 0.0;
  for (std::size_t g = 0; g < n / quant::kFp4Group; ++g) {
    const float* xg = x + g * quant::kFp4Group;
    const double s = c * absmax32(xg);
    if (!(s > 0.0)) {
      for (std::size_t i = 0; i < quant::kFp4Group; ++i) err += static_cast<double>(xg[i]) * xg[i];
      continue;
    }
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < quant::kFp4Group; i += 8)
      for (std::size_t j = 0; j < 8; ++j) {
        const double v = xg[i + j];
        const double y = e2m1_round_nb(v / s) * s;
        acc[j] += (y - v) * (y - v);
      }
    err += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  return err;
}

double fp4_round_mse(const std::vector<float>& x, double c) {
  return fp4_round_sq_error(x.data(), x.size(), static_cast<float>(c)) / static_cast<double>(x.size());
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
  auto cont = [&](double c) { return fp4_continuous_sq_error_fast(x.data(), x.size(), c) / n; };
  auto rnd = [&](double c) { return fp4_round_mse(x, c); };
  // The two searches are independent: on large samples (the global fit pools every layer's
  // reservoir) the rounded one runs on a second thread. Same result either way.
  std::future<void> rounded;
  auto search_rounded = [&] {
    r.c_rounded = minimise_1d(rnd, c_lo, c_hi, 96);
    r.mse_rounded = rnd(r.c_rounded);
  };
  if (x.size() >= (std::size_t{1} << 18)) rounded = std::async(std::launch::async, search_rounded);
  r.c_continuous = minimise_1d(cont, c_lo, c_hi, 96);
  r.mse_continuous = cont(r.c_continuous);
  if (rounded.valid()) rounded.get();
  else search_rounded();
  r.mse_rounded_paper = rnd(quant::kUltraQuantC);
  r.mse_ocp_floor = quant::fp4_mx_sq_error(x.data(), x.size(), quant::Fp4ScaleRule::OcpFloor, 0) / n;
  r.mse_rceil = quant::fp4_mx_sq_error(x.data(), x.size(), quant::Fp4ScaleRule::Rceil, 0) / n;
  r.mse_nvfp4 = quant::nvfp4_sq_error(x.data(), x.size()) / n;
  r.mse_int4 = quant::int4_group_sq_error(x.data(), x.size()) / n;
  return r;
}

}  // namespace mla::calib
