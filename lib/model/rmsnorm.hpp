#pragma once
// RMSNorm as DeepSeek/transformers compute it: y = x / sqrt(mean(x^2) + eps) * gamma.
// Kept separate and callable because TPLA replaces it per latent slice (SPEC 2 step 4).
#include <cstdint>

#include "core/tensor.hpp"

namespace mla::model {

// Row-wise RMSNorm of x [T, n] with gamma [n]. Throws InputError on a width mismatch.
MatrixR rmsnorm(const MatrixR& x, const VectorD& gamma, double eps);
// One vector of length n (in place is allowed: out may equal x).
void rmsnorm_row(const double* x, const double* gamma, int64_t n, double eps, double* out);

}  // namespace mla::model
