// Lloyd-Max known answers (Max 1960 table for N(0,1), 16 levels) and the analytic anchors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "quant/codebook.hpp"

using namespace mla::quant;

namespace {
// Published positive centroids of the 16-level Lloyd-Max quantiser for N(0,1), and its MSE.
const double kMaxTable[8] = {0.1284, 0.3881, 0.6568, 0.9423, 1.2562, 1.6181, 2.0690, 2.7326};
constexpr double kMaxMse = 0.009501;
constexpr double kTableRelTol = 0.005;   // the required 0.5% on 1M samples
constexpr double kAnalyticRelTol = 5e-4; // density path: table is given to 4 digits

void expect_matches_table(const Codebook& cb, double sigma, double rel) {
  ASSERT_EQ(cb.levels.size(), 16u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(cb.levels[8 + i], kMaxTable[i] * sigma, rel * kMaxTable[i] * sigma) << "level " << 8 + i;
    EXPECT_NEAR(cb.levels[7 - i], -kMaxTable[i] * sigma, rel * kMaxTable[i] * sigma) << "level " << 7 - i;
  }
}
}  // namespace

TEST(LloydMax, OneMillionGaussianSamplesReproduceMaxTable) {
  std::mt19937_64 rng(2024);
  std::normal_distribution<double> nd;
  // Antithetic pairs (v, -v): the table belongs to the symmetric density, and Lloyd's
  // translation mode is so weakly pinned that a 2-sigma sample asymmetry would shift the inner
  // centroids by ~3%. Symmetrising removes that noise, not any error of the algorithm.
  std::vector<double> s;
  s.reserve(1'000'000);
  for (int i = 0; i < 500'000; ++i) {
    const double v = nd(rng);
    s.push_back(v);
    s.push_back(-v);
  }
  const Codebook cb = lloyd_max_samples(s);
  EXPECT_TRUE(cb.converged);
  expect_matches_table(cb, 1.0, kTableRelTol);
  EXPECT_NEAR(cb.mse, kMaxMse, kTableRelTol * kMaxMse);
  // The reported MSE is the MSE of nearest-level quantisation (independent recomputation).
  EXPECT_NEAR(codebook_mse(cb.levels, s), cb.mse, 1e-9);
}

TEST(LloydMax, AnalyticGaussianTables) {
  const Codebook unit = lloyd_max_gaussian(1.0);
  expect_matches_table(unit, 1.0, kAnalyticRelTol);
  EXPECT_NEAR(unit.mse, kMaxMse, 1e-3 * kMaxMse);
  const Codebook d64 = lloyd_max_gaussian(1.0 / 8.0);  // N(0, 1/64)
  EXPECT_NEAR(d64.levels.back(), 0.3416, 1e-4);
  EXPECT_NEAR(d64.mse, kMaxMse / 64.0, 1e-3 * kMaxMse / 64.0);
}

TEST(LloydMax, SphereCoordinateAtD64IsCloseToButNotGaussian) {
  const Codebook beta = lloyd_max_sphere_coordinate(64);
  const Codebook gauss = lloyd_max_gaussian(1.0 / 8.0);
  ASSERT_EQ(beta.levels.size(), 16u);
  // Bounded support [-1,1] with variance 1/d: the tails are lighter than the Gaussian's, so
  // the outer centroids sit inside the Gaussian ones, by a little at d = 64.
  EXPECT_LT(beta.levels.back(), gauss.levels.back());
  EXPECT_GT(beta.levels.back(), 0.95 * gauss.levels.back());
  // Cross-check on samples: coordinates of random unit vectors in R^64.
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  std::vector<double> s;
  for (int v = 0; v < 20000; ++v) {
    double g[64], n2 = 0;
    for (double& x : g) { x = nd(rng); n2 += x * x; }
    for (double x : g) s.push_back(x / std::sqrt(n2));
  }
  const Codebook emp = lloyd_max_samples(s);
  for (int i = 8; i < 16; ++i) EXPECT_NEAR(emp.levels[i], beta.levels[i], 0.01 * beta.levels[i] + 1e-3);
}

TEST(LloydMax, NearestLevelAndErrors) {
  const std::vector<double> lv = {-1.0, 0.0, 2.0};
  EXPECT_EQ(nearest_level(lv, -5.0), 0);
  EXPECT_EQ(nearest_level(lv, 0.9), 1);
  EXPECT_EQ(nearest_level(lv, 1.0), 1);  // tie -> lower
  EXPECT_EQ(nearest_level(lv, 1.1), 2);
  EXPECT_THROW(lloyd_max_samples({}), mla::InputError);
  EXPECT_THROW(lloyd_max_samples({1.0, NAN}), mla::InputError);
}
