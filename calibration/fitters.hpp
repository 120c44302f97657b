#pragma once
// Fitters run on finalised statistics: PCA (LAPACKE), energy fractions, mu, the FP4 constant,
// protected layers.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "quant/fp4_kv.hpp"

namespace mla::calib {

// Eigenpairs of a symmetric matrix, eigenvalues descending, eigenvectors as columns, each
// column's sign fixed so its largest-magnitude entry is positive (deterministic output).
struct Eigen_ {
  VectorD values;
  Eigen::MatrixXd vectors;
};
Eigen_ symmetric_eigen(const MatrixR& m);

// f_k = tr(U_k^T M U_k) / tr(M) for g equal slices of the columns of basis U (d x d).
std::vector<double> energy_fractions(const MatrixR& second_moment, const Eigen::MatrixXd& basis,
                                     int g);
// diag(U^T M U) (one dgemm), and the fractions f_k for any g from it: energy_fractions without
// a product per g.
VectorD basis_energies(const MatrixR& second_moment, const Eigen::MatrixXd& basis);
std::vector<double> energy_fractions_from(const VectorD& energies, double trace, int g);

// mu from fit sums, with the energy guard: when the partial logit's energy pp/n is below
// `min_rel_energy` times the full logit's zz/n, mu stays 1 and `guarded` is set.
struct MuFit {
  double mu = 1.0;
  bool guarded = false;
};
struct FitSums;
MuFit fit_mu(const FitSums& s, double min_rel_energy);

// FP4 constant fit over rows of rotated keys (groups of 32). Both the continuous-scale
// optimum (UltraQuant's objective, no power-of-two rounding) and the rounded one (the
// UE8M0 encoder's actual objective) are found by a log-spaced grid plus golden refinement.
struct Fp4ConstantFit {
  double c_continuous = 0, mse_continuous = 0;   // continuous scale s = c*m
  double c_rounded = 0, mse_rounded = 0;          // E = round(log2(c*m)), fitted
  double mse_rounded_paper = 0;                   // E = round(log2(0.156*m))
  double mse_ocp_floor = 0, mse_rceil = 0, mse_nvfp4 = 0, mse_int4 = 0;
  double mean_square = 0;                         // E[x^2] of the sample (for relative MSE)
  int64_t values = 0;
};
Fp4ConstantFit fit_fp4_constant(const std::vector<float>& x, double c_lo = 0.08, double c_hi = 0.32);
// Mean squared error of the rounded rule at constant c.
double fp4_round_mse(const std::vector<float>& x, double c);
// The same sums as quant::fp4_mx_sq_error(..., Round, c) and quant::fp4_continuous_sq_error
// (same per-value operations; eight interleaved partial sums per group instead of one running
// sum, so equal to ~1e-13 relative, tested), with a branch-free E2M1 rounding: ~20x faster, for
// the 1-D searches (2 x ~130 evaluations per layer).
double fp4_round_sq_error(const float* x, std::size_t n, float c);
double fp4_continuous_sq_error_fast(const float* x, std::size_t n, double c);

}  // namespace mla::calib
