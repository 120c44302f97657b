#include "calibration/qk_basis.hpp"

#include <cblas.h>

#include <cmath>

#include "core/error.hpp"

namespace mla::calib {

void QueryMoment::collect(const MatrixR& q) {
  if (q.cols() != sum.cols())
    throw InputError("QueryMoment: query rows of width " + std::to_string(q.cols()) + ", expected " +
                     std::to_string(sum.cols()));
  if (q.rows() == 0) return;
  const int d = static_cast<int>(q.cols()), n = static_cast<int>(q.rows());
  // Lower triangle of sum += q^T q (row-major q [n, d]), mirrored in finalize.
  cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, d, n, 1.0, q.data(), d, 1.0, sum.data(), d);
  count += q.rows();
}

void QueryMoment::merge(const QueryMoment& o) {
  sum += o.sum;
  count += o.count;
}

MatrixR QueryMoment::finalize() const {
  MatrixR m = sum.triangularView<Eigen::Lower>();
  m.triangularView<Eigen::StrictlyUpper>() = sum.transpose().triangularView<Eigen::StrictlyUpper>();
  if (count > 0) m /= static_cast<double>(count);
  return m;
}

namespace {

// The basis in its moments' coordinates (A_x = U^T M_x U) and J's per-slice sums, per level
// (one level per group count g): F = sum diag A_u, Z = sum diag A_s (= E[z p_k]),
// E2 = sum_{m,n in slice} A_q(m,n) A_u(m,n) (= E[p_k^2]).
class Objective {
 public:
  Objective(const MatrixR& mu, const MatrixR& mq, const Eigen::MatrixXd& u, const std::vector<int>& groups)
      : mu_(mu), mq_(mq), groups_(groups), U(u) {
    const int64_t d = mu.rows();
    if (mu.cols() != d || mq.rows() != d || mq.cols() != d || u.rows() != d || u.cols() != d)
      throw InputError("qk basis: key moment, query moment and basis must all be " + std::to_string(d) + " x " +
                       std::to_string(d));
    for (int g : groups)
      if (g < 1 || d % g != 0)
        throw InputError("qk basis: group count " + std::to_string(g) + " does not divide d_c = " + std::to_string(d));
    const MatrixR p = mu * mq;
    s_ = 0.5 * (p + p.transpose());
    recompute();
  }

  void recompute() {
    au = U.transpose() * mu_ * U;
    aq = U.transpose() * mq_ * U;
    as = U.transpose() * s_ * U;
    tr_u = au.trace();
    ez2 = as.trace();
    F.assign(groups_.size(), {});
    Z.assign(groups_.size(), {});
    E2.assign(groups_.size(), {});
    for (std::size_t l = 0; l < groups_.size(); ++l) {
      F[l].assign(groups_[l], 0.0);
      Z[l].assign(groups_[l], 0.0);
      E2[l].assign(groups_[l], 0.0);
      for (int k = 0; k < groups_[l]; ++k) slice_sums(l, k);
    }
  }

  void slice_sums(std::size_t l, int k) {
    const int64_t w = width(l), m0 = k * w;
    double f = 0, z = 0, e = 0;
    for (int64_t m = m0; m < m0 + w; ++m) {
      f += au(m, m);
      z += as(m, m);
      for (int64_t n = m0; n < m0 + w; ++n) e += aq(m, n) * au(m, n);
    }
    F[l][k] = f;
    Z[l][k] = z;
    E2[l][k] = e;
  }

  double term(double f, double z, double e2) const {
    if (!(e2 > 1e-300) || !(ez2 > 0) || !(tr_u > 0)) return 0.0;
    return f / tr_u * (z * z) / (e2 * ez2);
  }

  double value() const {
    double j = 0;
    for (std::size_t l = 0; l < groups_.size(); ++l)
      for (int k = 0; k < groups_[l]; ++k) j += term(F[l][k], Z[l][k], E2[l][k]);
    return j;
  }

  int64_t width(std::size_t l) const { return U.rows() / groups_[l]; }
  std::size_t levels() const { return groups_.size(); }

  // Change of J when columns i and j (i in another slice than j at some level) are rotated:
  // u_i <- c u_i + s u_j, u_j <- -s u_i + c u_j. prepare() gathers the O(width) sums once per
  // pair; delta() is then O(levels) per angle.
  struct PairSums {
    std::vector<int> a, b;                       // slices of i and j per level (a == b: unchanged)
    std::vector<double> sa_ii, sa_x, sa_jj, sb_ii, sb_x, sb_jj, rest_a, rest_b;
  };
  void prepare(int64_t i, int64_t j, PairSums& p) const {
    const std::size_t L = groups_.size();
    p.a.assign(L, 0); p.b.assign(L, 0);
    p.sa_ii.assign(L, 0); p.sa_x.assign(L, 0); p.sa_jj.assign(L, 0);
    p.sb_ii.assign(L, 0); p.sb_x.assign(L, 0); p.sb_jj.assign(L, 0);
    p.rest_a.assign(L, 0); p.rest_b.assign(L, 0);
    for (std::size_t l = 0; l < L; ++l) {
      const int64_t w = width(l);
      p.a[l] = static_cast<int>(i / w);
      p.b[l] = static_cast<int>(j / w);
      if (p.a[l] == p.b[l]) continue;
      auto sums = [&](int slice, int64_t self, double& s_ii, double& s_x, double& s_jj) {
        for (int64_t m = slice * w; m < (slice + 1) * w; ++m) {
          if (m == self) continue;
          s_ii += aq(i, m) * au(i, m);
          s_x += aq(i, m) * au(j, m) + aq(j, m) * au(i, m);
          s_jj += aq(j, m) * au(j, m);
        }
      };
      sums(p.a[l], i, p.sa_ii[l], p.sa_x[l], p.sa_jj[l]);
      sums(p.b[l], j, p.sb_ii[l], p.sb_x[l], p.sb_jj[l]);
      p.rest_a[l] = E2[l][p.a[l]] - aq(i, i) * au(i, i) - 2 * p.sa_ii[l];
      p.rest_b[l] = E2[l][p.b[l]] - aq(j, j) * au(j, j) - 2 * p.sb_jj[l];
    }
  }

  double delta(int64_t i, int64_t j, const PairSums& p, double theta) const {
    const double c = std::cos(theta), s = std::sin(theta);
    auto rot_ii = [&](const MatrixR& a) { return c * c * a(i, i) + 2 * c * s * a(i, j) + s * s * a(j, j); };
    auto rot_jj = [&](const MatrixR& a) { return s * s * a(i, i) - 2 * c * s * a(i, j) + c * c * a(j, j); };
    const double u_ii = rot_ii(au), q_ii = rot_ii(aq), s_ii = rot_ii(as);
    const double u_jj = rot_jj(au), q_jj = rot_jj(aq), s_jj = rot_jj(as);
    double d = 0;
    for (std::size_t l = 0; l < groups_.size(); ++l) {
      const int a = p.a[l], b = p.b[l];
      if (a == b) continue;
      const double fa = F[l][a] - au(i, i) + u_ii, za = Z[l][a] - as(i, i) + s_ii;
      const double ea = p.rest_a[l] + q_ii * u_ii + 2 * (c * c * p.sa_ii[l] + c * s * p.sa_x[l] + s * s * p.sa_jj[l]);
      const double fb = F[l][b] - au(j, j) + u_jj, zb = Z[l][b] - as(j, j) + s_jj;
      const double eb = p.rest_b[l] + q_jj * u_jj + 2 * (s * s * p.sb_ii[l] - c * s * p.sb_x[l] + c * c * p.sb_jj[l]);
      d += term(fa, za, ea) + term(fb, zb, eb) - term(F[l][a], Z[l][a], E2[l][a]) - term(F[l][b], Z[l][b], E2[l][b]);
    }
    return d;
  }

  void rotate(int64_t i, int64_t j, double theta) {
    const double c = std::cos(theta), s = std::sin(theta);
    const Eigen::VectorXd ui = U.col(i), uj = U.col(j);
    U.col(i) = c * ui + s * uj;
    U.col(j) = -s * ui + c * uj;
    for (MatrixR* a : {&au, &aq, &as}) {  // A <- G^T A G on rows and columns i, j
      const Eigen::RowVectorXd ri = a->row(i), rj = a->row(j);
      a->row(i) = c * ri + s * rj;
      a->row(j) = -s * ri + c * rj;
      const Eigen::VectorXd ci = a->col(i), cj = a->col(j);
      a->col(i) = c * ci + s * cj;
      a->col(j) = -s * ci + c * cj;
    }
    for (std::size_t l = 0; l < groups_.size(); ++l) {
      const int64_t w = width(l);
      const int a = static_cast<int>(i / w), b = static_cast<int>(j / w);
      if (a == b) continue;
      slice_sums(l, a);
      slice_sums(l, b);
    }
  }

 private:
  const MatrixR& mu_;
  const MatrixR& mq_;
  MatrixR s_;
  std::vector<int> groups_;

 public:
  Eigen::MatrixXd U;
  MatrixR au, aq, as;
  double tr_u = 0, ez2 = 0;
  std::vector<std::vector<double>> F, Z, E2;
};

}  // namespace

double qk_objective(const MatrixR& key_moment, const MatrixR& query_moment, const Eigen::MatrixXd& basis,
                    const std::vector<int>& groups) {
  return Objective(key_moment, query_moment, basis, groups).value();
}

QkFit fit_qk_basis(const MatrixR& key_moment, const MatrixR& query_moment, const Eigen::MatrixXd& start,
                   const std::vector<int>& groups, int max_sweeps, double tolerance) {
  Objective J(key_moment, query_moment, start, groups);
  QkFit fit;
  fit.objective_start = J.value();
  double current = fit.objective_start;
  const int64_t d = start.rows();
  constexpr int kGrid = 48;  // angles in (-pi/2, pi/2]; the best is refined by golden section
  const double pi = std::acos(-1.0);
  Objective::PairSums sums;
  fit.objective = fit.objective_start;
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    const double sweep_start = current;
    int64_t accepted = 0;
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = i + 1; j < d; ++j) {
        bool split = false;  // i and j in different slices at some level
        for (std::size_t l = 0; l < J.levels() && !split; ++l) split = i / J.width(l) != j / J.width(l);
        if (!split) continue;
        J.prepare(i, j, sums);
        double best = 0, best_theta = 0;
        for (int n = 1; n <= kGrid; ++n) {
          const double th = -pi / 2 + n * pi / kGrid;
          const double v = J.delta(i, j, sums, th);
          if (v > best) { best = v; best_theta = th; }
        }
        if (best <= 0) continue;
        // Golden section on the bracket around the best grid angle.
        double lo = best_theta - pi / kGrid, hi = best_theta + pi / kGrid;
        const double r = 0.5 * (std::sqrt(5.0) - 1);
        double x1 = hi - r * (hi - lo), x2 = lo + r * (hi - lo);
        double f1 = J.delta(i, j, sums, x1), f2 = J.delta(i, j, sums, x2);
        for (int it = 0; it < 40; ++it) {
          if (f1 < f2) { lo = x1; x1 = x2; f1 = f2; x2 = lo + r * (hi - lo); f2 = J.delta(i, j, sums, x2); }
          else { hi = x2; x2 = x1; f2 = f1; x1 = hi - r * (hi - lo); f1 = J.delta(i, j, sums, x1); }
        }
        if (std::max(f1, f2) > best) { best = std::max(f1, f2); best_theta = f1 > f2 ? x1 : x2; }
        // Only clear gains: rounding noise must not move a basis that is already optimal.
        if (best <= 1e-12 * std::max(std::fabs(current), 1e-300)) continue;
        J.rotate(i, j, best_theta);
        current += best;
        ++accepted;
      }
    }
    J.recompute();  // no drift from the incremental updates
    const double now = J.value();
    const double gain = now - sweep_start;
    ++fit.sweeps;
    fit.rotations += accepted;
    fit.objective = now;
    current = now;
    if (accepted == 0 || gain <= tolerance * std::fabs(now)) break;
  }
  fit.basis = J.U;
  return fit;
}

}  // namespace mla::calib
