#pragma once
// The "qk" latent basis for TPLA slicing (docs/math.md, "A basis from queries and keys").
//
// PCA keeps the most latent energy in the first slices. What each TPLA rank needs is its
// slice's share of the content logit z = q.u (q the gamma- and W_UK-absorbed query in the
// coordinates of the normalised latent u = c / rms(c)): rank k attends with p_k = q^T U_k U_k^T u
// (times mu_k) instead of z, and its output carries slice k of the values. With queries and
// keys drawn independently (second moments M_q = E[q q^T] over positions and heads, M_u = E[u u^T])
//   f_k   = tr(U_k^T M_u U_k) / tr(M_u)                       value (latent) energy of slice k
//   R^2_k = E[z p_k]^2 / (E[p_k^2] E[z^2])                     logit kept by slice k (mu fitted)
//   E[z p_k]   = tr(U_k^T S U_k),  S = (M_u M_q + M_q M_u) / 2
//   E[p_k^2]   = tr((U_k^T M_q U_k)(U_k^T M_u U_k)),  E[z^2] = tr(M_u M_q)
// and a slice's output error is ~ f_k (1 - R^2_k). The qk basis maximises
//   J(U) = sum over g in the requested group counts, sum_k f_k R^2_k
// by Jacobi sweeps (plane rotations between columns of different slices, each kept only when it
// raises J) started from the PCA basis, so J(qk) >= J(PCA) on the fitting moments. With
// isotropic queries (M_q = s I) R^2_k = f_k and J = sum f_k^2, whose maximum is PCA's
// (majorisation): no rotation improves it and the qk basis IS the PCA basis.
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"

namespace mla::calib {

// Streaming second moment of the absorbed queries: sum over positions and heads of q q^T.
struct QueryMoment {
  MatrixR sum;
  int64_t count = 0;  // query vectors (positions x heads)
  explicit QueryMoment(int64_t d = 0) : sum(MatrixR::Zero(d, d)) {}
  // q: [n, d_c] rows, one per (position, head), in u coordinates (gamma folded in).
  void collect(const MatrixR& q);
  void merge(const QueryMoment& o);
  MatrixR finalize() const;  // E[q q^T]; zero when empty
};

// J(U) above (U columns = basis vectors; every g must divide d_c).
double qk_objective(const MatrixR& key_moment, const MatrixR& query_moment, const Eigen::MatrixXd& basis,
                    const std::vector<int>& groups);

struct QkFit {
  Eigen::MatrixXd basis;
  double objective_start = 0, objective = 0;  // J at the start (PCA) and at the end
  int sweeps = 0;
  int64_t rotations = 0;                      // accepted plane rotations
};
// Jacobi sweeps from `start` (normally the PCA basis) until a sweep raises J by less than
// `tolerance` (relative) or after `max_sweeps`.
QkFit fit_qk_basis(const MatrixR& key_moment, const MatrixR& query_moment, const Eigen::MatrixXd& start,
                   const std::vector<int>& groups, int max_sweeps = 10, double tolerance = 1e-9);

}  // namespace mla::calib
