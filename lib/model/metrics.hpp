#pragma once
// Error metrics of SPEC section 5, for an output y against a reference r (both flattened).
// Order of checks: NaN/Inf positions (and kinds: NaN, +Inf, -Inf) must match first; only
// then the finite positions are compared: RMSE, cosine difference 1 - y.r/(|y||r|),
// relative L2 |y-r|/|r|, max abs error and where it is.
#include <cstdint>
#include <span>
#include <string>

namespace mla::model {

struct ErrorMetrics {
  int64_t count = 0;                 // elements compared
  bool nonfinite_match = true;       // NaN/Inf positions and kinds agree
  int64_t nonfinite_mismatch = -1;   // first index where they do not (-1: none)
  int64_t nonfinite_count = 0;       // positions non-finite in both (excluded below)
  double rmse = 0.0;
  double cos_diff = 0.0;             // 0 when both are all-zero; 1 when exactly one is
  double rel_l2 = 0.0;               // |y-r|/|r|; 0 if y == r, +inf if r == 0 != y
  double max_abs = 0.0;
  int64_t worst_index = -1;          // index of max |y-r| (-1 when nothing finite compared)
  double worst_value = 0.0;          // y at worst_index
  double worst_reference = 0.0;      // r at worst_index

  // One line: "n=.. rmse=.. cos_diff=.. rel_l2=.. max_abs=.. at [i] (y vs r)" or the
  // non-finite mismatch.
  std::string summary() const;
};

// Throws InputError when the sizes differ. All arithmetic in float64.
ErrorMetrics compare(std::span<const double> y, std::span<const double> r);
ErrorMetrics compare(std::span<const float> y, std::span<const double> r);

}  // namespace mla::model
