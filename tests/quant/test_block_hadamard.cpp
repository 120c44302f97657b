// Block-diagonal Hadamard: exists for every width, orthogonal, its fast transform matches the
// dense basis, and it is exactly the Sylvester basis when the width is a power of two.
#include <gtest/gtest.h>

#include "quant/hadamard.hpp"

using namespace mla::quant;

TEST(BlockHadamard, BlocksAreTheBinaryDigitsLargestFirst) {
  EXPECT_EQ(hadamard_blocks(96), (std::vector<std::size_t>{64, 32}));
  EXPECT_EQ(hadamard_blocks(100), (std::vector<std::size_t>{64, 32, 4}));
  EXPECT_EQ(hadamard_blocks(512), (std::vector<std::size_t>{512}));
  EXPECT_EQ(hadamard_blocks(1), (std::vector<std::size_t>{1}));
}

TEST(BlockHadamard, OrthogonalForWidthsThatAreNotPowersOfTwo) {
  for (std::size_t n : {96u, 100u, 3u, 192u}) {
    const Eigen::MatrixXd u = block_hadamard_basis(n, 7);
    const double dev = (u.transpose() * u - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff();
    EXPECT_LT(dev, 1e-14) << "n=" << n;
    // Mixing inside the first block: every entry of it is +-1/sqrt(block).
    const auto b = hadamard_blocks(n)[0];
    EXPECT_NEAR(std::abs(u(0, static_cast<Eigen::Index>(b) - 1)), 1.0 / std::sqrt(static_cast<double>(b)), 1e-15);
  }
}

TEST(BlockHadamard, FastTransformMatchesTheDenseBasis) {
  const std::size_t n = 96;
  const auto signs = random_signs(n, 11);
  const Eigen::MatrixXd u = block_hadamard_basis(n, 11);
  Eigen::VectorXd x(n);
  for (std::size_t i = 0; i < n; ++i) x(i) = std::sin(0.37 * static_cast<double>(i) + 1.0);
  const Eigen::VectorXd want = u.transpose() * x;
  Eigen::VectorXd got = x;
  block_hadamard_rotate_inplace(got.data(), n, signs.data());
  EXPECT_LT((got - want).cwiseAbs().maxCoeff(), 1e-14);
}

TEST(BlockHadamard, EqualsSylvesterAtPowersOfTwo) {
  for (std::size_t n : {8u, 64u, 512u}) {
    EXPECT_EQ(block_hadamard_basis(n, 5), hadamard_basis(n, 5)) << "n=" << n;  // bit for bit
    const auto s = random_signs(n, 5);
    std::vector<double> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] = std::cos(1.3 * static_cast<double>(i));
    hadamard_rotate_inplace(a.data(), n, s.data());
    block_hadamard_rotate_inplace(b.data(), n, s.data());
    EXPECT_EQ(a, b);
  }
}
