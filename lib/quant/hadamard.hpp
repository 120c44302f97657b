#pragma once
// Walsh-Hadamard rotations of the latent (SPEC section 2 step 2 and section 4 FP4 format).
//
// Convention shared by mla-convert (U rotation), mla-calibrate (energy fractions under the
// "hadamard" basis) and the FP4 KV format (key/query rotation):
//
//   H_n   Sylvester Hadamard matrix, entries +-1, H_1 = [1], H_2n = [[H, H], [H, -H]];
//         H_n is symmetric and H_n H_n = n I.
//   D     diag(s), s_i in {+1,-1} drawn from std::mt19937_64(seed) (standard-specified, so
//         identical on every platform): s_i = -1 iff the top bit of the i-th draw is set.
//         Without a seed D = I.
//   U     = D H_n / sqrt(n)   (orthogonal; columns are the basis vectors).
//
// A latent vector c (column) in the rotated basis is  c' = U^T c = H_n (D c) / sqrt(n):
// first flip signs, then the fast transform, then scale. That is exactly what
// `hadamard_rotate_inplace` computes, and what `kv_a_proj_with_mqa <- U^T W_DKV` produces.
// The inverse is c = U c' = D (H_n c') / sqrt(n) (`hadamard_unrotate_inplace`).
#include <Eigen/Dense>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace mla::quant {

// True when n is a power of two (n >= 1).
bool is_power_of_two(std::size_t n);

// The unnormalised Sylvester Hadamard matrix H_n (entries +-1). Throws InputError when n is
// not a power of two (Sylvester's construction only exists for n = 2^k).
Eigen::MatrixXd sylvester_hadamard(std::size_t n);

// The +-1 diagonal of D for a seed (see the convention above).
std::vector<double> random_signs(std::size_t n, uint64_t seed);

// U = D H_n / sqrt(n) as a dense orthogonal matrix (D = I without a seed).
Eigen::MatrixXd hadamard_basis(std::size_t n, std::optional<uint64_t> seed = std::nullopt);

// In-place fast Walsh-Hadamard transform, unnormalised: x <- H_n x. O(n log n).
// Throws InputError when n is not a power of two.
void fwht_inplace(double* x, std::size_t n);
void fwht_inplace(float* x, std::size_t n);

// x <- U^T x = H_n (D x) / sqrt(n). `signs` may be null (D = I), else n entries of +-1.
void hadamard_rotate_inplace(double* x, std::size_t n, const double* signs = nullptr);
void hadamard_rotate_inplace(float* x, std::size_t n, const double* signs = nullptr);
// x <- U x = D (H_n x) / sqrt(n), the inverse of hadamard_rotate_inplace.
void hadamard_unrotate_inplace(double* x, std::size_t n, const double* signs = nullptr);

// Block-diagonal Hadamard for any width n >= 1 (the "hadamard-block" basis; docs/math.md):
// n is split into its binary digits, largest first (96 = 64 + 32, 100 = 64 + 32 + 4), each
// block gets a Sylvester H_b / sqrt(b), then the same random signs D as above over all n:
//   U = D blockdiag(H_b1, H_b2, ...) / sqrt(b_i).
// Orthogonal for every n; equal to hadamard_basis(n, seed) when n is a power of two (one
// block). Mixing happens only inside a block: a width of 2^k + small mixes the small part
// little (the report's f_k shows it).
std::vector<std::size_t> hadamard_blocks(std::size_t n);
Eigen::MatrixXd block_hadamard_basis(std::size_t n, std::optional<uint64_t> seed = std::nullopt);
// x <- U^T x for the block basis: signs first, then each block's fast transform and scale.
void block_hadamard_rotate_inplace(double* x, std::size_t n, const double* signs = nullptr);

}  // namespace mla::quant
