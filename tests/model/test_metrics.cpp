// Error metrics of SPEC 5 on vectors whose answers are worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "model/metrics.hpp"
#include "model/rmsnorm.hpp"

namespace mla::model {
namespace {

constexpr double kTight = 1e-15;  // closed-form values on 3-element vectors
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

TEST(Metrics, KnownVectors) {
  const std::vector<double> y{1.0, 2.0, 3.0};
  const std::vector<double> r{1.0, 2.0, 4.0};
  const ErrorMetrics m = compare(y, r);
  EXPECT_TRUE(m.nonfinite_match);
  EXPECT_EQ(m.count, 3);
  EXPECT_NEAR(m.rmse, std::sqrt(1.0 / 3.0), kTight);
  EXPECT_NEAR(m.rel_l2, 1.0 / std::sqrt(21.0), kTight);
  EXPECT_NEAR(m.cos_diff, 1.0 - 17.0 / std::sqrt(14.0 * 21.0), kTight);
  EXPECT_EQ(m.worst_index, 2);
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(m.worst_value, 3.0);
  EXPECT_DOUBLE_EQ(m.worst_reference, 4.0);
}

TEST(Metrics, FloatOutputAgainstDoubleReference) {
  const std::vector<float> y{0.5f, -1.0f};
  const std::vector<double> r{0.5, -1.5};
  const ErrorMetrics m = compare(y, r);
  EXPECT_NEAR(m.rmse, std::sqrt(0.125), kTight);
  EXPECT_EQ(m.worst_index, 1);
}

TEST(Metrics, NaNPositionMismatchDetectedFirst) {
  const std::vector<double> y{1.0, kNaN, 3.0};
  const std::vector<double> r{1.0, 2.0, 3.0};
  const ErrorMetrics m = compare(y, r);
  EXPECT_FALSE(m.nonfinite_match);
  EXPECT_EQ(m.nonfinite_mismatch, 1);
  EXPECT_TRUE(std::isnan(m.rel_l2));  // nothing else is reported as a number
  EXPECT_NE(m.summary().find("NaN/Inf positions differ"), std::string::npos);
}

TEST(Metrics, InfKindMustMatch) {
  const ErrorMetrics m = compare(std::vector<double>{kInf, 1.0}, std::vector<double>{-kInf, 1.0});
  EXPECT_FALSE(m.nonfinite_match);
  EXPECT_EQ(m.nonfinite_mismatch, 0);
  const ErrorMetrics nan_vs_inf =
      compare(std::vector<double>{1.0, kNaN}, std::vector<double>{1.0, kInf});
  EXPECT_EQ(nan_vs_inf.nonfinite_mismatch, 1);
}

TEST(Metrics, MatchingNonFiniteExcludedFromNumbers) {
  const ErrorMetrics m =
      compare(std::vector<double>{kNaN, 2.0, kInf}, std::vector<double>{kNaN, 1.0, kInf});
  EXPECT_TRUE(m.nonfinite_match);
  EXPECT_EQ(m.nonfinite_count, 2);
  EXPECT_DOUBLE_EQ(m.rmse, 1.0);
  EXPECT_DOUBLE_EQ(m.rel_l2, 1.0);
  EXPECT_EQ(m.worst_index, 1);
}

TEST(Metrics, ZeroVectors) {
  const ErrorMetrics both = compare(std::vector<double>{0, 0}, std::vector<double>{0, 0});
  EXPECT_EQ(both.cos_diff, 0.0);
  EXPECT_EQ(both.rel_l2, 0.0);
  const ErrorMetrics ref_zero = compare(std::vector<double>{1, 0}, std::vector<double>{0, 0});
  EXPECT_EQ(ref_zero.cos_diff, 1.0);
  EXPECT_TRUE(std::isinf(ref_zero.rel_l2));
}

TEST(Metrics, SizeMismatchThrows) {
  EXPECT_THROW(compare(std::vector<double>{1, 2}, std::vector<double>{1}), InputError);
}

TEST(RmsNorm, KnownVector) {
  MatrixR x(1, 2);
  x << 3.0, 4.0;
  VectorD g(2);
  g << 1.0, 2.0;
  const MatrixR y = rmsnorm(x, g, 0.0);
  const double rms = std::sqrt(12.5);  // mean(9, 16)
  EXPECT_NEAR(y(0, 0), 3.0 / rms, kTight);
  EXPECT_NEAR(y(0, 1), 8.0 / rms, kTight);
  // eps enters under the square root, as in transformers: 1 / sqrt(mean + eps).
  const MatrixR y_eps = rmsnorm(x, g, 0.5);
  EXPECT_NEAR(y_eps(0, 0), 3.0 / std::sqrt(13.0), kTight);
  EXPECT_THROW(rmsnorm(x, VectorD::Ones(3), 0.0), InputError);
}

}  // namespace
}  // namespace mla::model
