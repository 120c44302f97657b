#include "quant/hadamard.hpp"

#include <cmath>
#include <random>
#include <string>

#include "core/error.hpp"

namespace mla::quant {

bool is_power_of_two(std::size_t n) { return n != 0 && (n & (n - 1)) == 0; }

static void require_power_of_two(std::size_t n, const char* what) {
  if (!is_power_of_two(n)) {
    throw InputError(std::string(what) + ": size " + std::to_string(n) +
                     " is not a power of two (Sylvester Hadamard matrices exist only for n = 2^k)");
  }
}

Eigen::MatrixXd sylvester_hadamard(std::size_t n) {
  require_power_of_two(n, "sylvester_hadamard");
  Eigen::MatrixXd h(n, n);
  // Entry (i, j) of H_n is (-1)^popcount(i & j): the closed form of the Sylvester recursion.
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      h(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) =
          (__builtin_popcountll(i & j) & 1) ? -1.0 : 1.0;
    }
  }
  return h;
}

std::vector<double> random_signs(std::size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> s(n);
  for (auto& v : s) v = (rng() >> 63) ? -1.0 : 1.0;
  return s;
}

Eigen::MatrixXd hadamard_basis(std::size_t n, std::optional<uint64_t> seed) {
  Eigen::MatrixXd u = sylvester_hadamard(n) / std::sqrt(static_cast<double>(n));
  if (seed) {
    const auto s = random_signs(n, *seed);
    for (std::size_t i = 0; i < n; ++i) u.row(static_cast<Eigen::Index>(i)) *= s[i];
  }
  return u;
}

template <typename T>
static void fwht_impl(T* x, std::size_t n) {
  require_power_of_two(n, "fwht_inplace");
  for (std::size_t len = 1; len < n; len <<= 1) {
    for (std::size_t i = 0; i < n; i += 2 * len) {
      for (std::size_t j = i; j < i + len; ++j) {
        const T a = x[j];
        const T b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
}

void fwht_inplace(double* x, std::size_t n) { fwht_impl(x, n); }
void fwht_inplace(float* x, std::size_t n) { fwht_impl(x, n); }

void hadamard_rotate_inplace(double* x, std::size_t n, const double* signs) {
  if (signs) {
    for (std::size_t i = 0; i < n; ++i) x[i] *= signs[i];
  }
  fwht_inplace(x, n);
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));
  for (std::size_t i = 0; i < n; ++i) x[i] *= scale;
}

void hadamard_rotate_inplace(float* x, std::size_t n, const double* signs) {
  if (signs) {
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * signs[i]);
  }
  fwht_inplace(x, n);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (std::size_t i = 0; i < n; ++i) x[i] *= scale;
}

void hadamard_unrotate_inplace(double* x, std::size_t n, const double* signs) {
  fwht_inplace(x, n);
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));
  for (std::size_t i = 0; i < n; ++i) x[i] *= scale * (signs ? signs[i] : 1.0);
}

std::vector<std::size_t> hadamard_blocks(std::size_t n) {
  if (n == 0) throw InputError("hadamard_blocks: width 0");
  std::vector<std::size_t> b;
  for (int bit = 63; bit >= 0; --bit)
    if (n & (std::size_t{1} << bit)) b.push_back(std::size_t{1} << bit);
  return b;
}

Eigen::MatrixXd block_hadamard_basis(std::size_t n, std::optional<uint64_t> seed) {
  Eigen::MatrixXd u = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n));
  Eigen::Index at = 0;
  for (std::size_t b : hadamard_blocks(n)) {
    const auto e = static_cast<Eigen::Index>(b);
    u.block(at, at, e, e) = sylvester_hadamard(b) / std::sqrt(static_cast<double>(b));
    at += e;
  }
  if (seed) {
    const auto s = random_signs(n, *seed);
    for (std::size_t i = 0; i < n; ++i) u.row(static_cast<Eigen::Index>(i)) *= s[i];
  }
  return u;
}

void block_hadamard_rotate_inplace(double* x, std::size_t n, const double* signs) {
  if (signs) {
    for (std::size_t i = 0; i < n; ++i) x[i] *= signs[i];
  }
  std::size_t at = 0;
  for (std::size_t b : hadamard_blocks(n)) {
    hadamard_rotate_inplace(x + at, b, nullptr);
    at += b;
  }
}

}  // namespace mla::quant
