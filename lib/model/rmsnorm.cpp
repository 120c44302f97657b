#include "model/rmsnorm.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"

namespace mla::model {

void rmsnorm_row(const double* x, const double* gamma, int64_t n, double eps, double* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * gamma[i];
}

MatrixR rmsnorm(const MatrixR& x, const VectorD& gamma, double eps) {
  if (gamma.size() != x.cols()) {
    throw InputError("rmsnorm: gamma has " + std::to_string(gamma.size()) +
                     " entries but the rows have width " + std::to_string(x.cols()));
  }
  MatrixR out(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    rmsnorm_row(x.row(t).data(), gamma.data(), x.cols(), eps, out.row(t).data());
  }
  return out;
}

}  // namespace mla::model
