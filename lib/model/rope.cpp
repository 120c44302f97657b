#include "model/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/error.hpp"

namespace mla::model {

double yarn_get_mscale(double scale, double m) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * m * std::log(scale) + 1.0;
}

namespace {

// Dimension index (of `dim`) at which a frequency completes `rotations` turns over
// `max_pos` positions (YaRN's find_correction_dim).
double correction_dim(double rotations, int64_t dim, double theta, double max_pos) {
  return static_cast<double>(dim) * std::log(max_pos / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(theta));
}

}  // namespace

Rope::Rope(const MlaConfig& cfg)
    : Rope(cfg.qk_rope_head_dim, cfg.rope_theta, cfg.yarn,
           cfg.rope_interleave ? RopeLayout::kInterleavedPairs : RopeLayout::kHalfSplit) {}

Rope::Rope(int64_t dim, double theta, const std::optional<YarnScaling>& yarn, RopeLayout layout)
    : dim_(dim), layout_(layout) {
  if (dim <= 0 || dim % 2 != 0) {
    throw InputError("RoPE: qk_rope_head_dim must be positive and even, got " +
                     std::to_string(dim));
  }
  if (!(theta > 1.0)) {
    throw InputError("RoPE: rope_theta must be > 1, got " + std::to_string(theta));
  }
  const int64_t half = dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq_[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  if (!yarn) return;

  const YarnScaling& y = *yarn;
  if (!(y.factor > 0.0)) {
    throw InputError("RoPE: rope_scaling.factor must be > 0, got " + std::to_string(y.factor));
  }
  // transformers: attention_factor = mscale ratio when both are set (truthy), else
  // get_mscale(factor). Our config cannot tell an absent mscale from 1.0 (docs/math.md).
  attention_factor_ = (y.mscale != 0.0 && y.mscale_all_dim != 0.0)
                          ? yarn_get_mscale(y.factor, y.mscale) /
                                yarn_get_mscale(y.factor, y.mscale_all_dim)
                          : yarn_get_mscale(y.factor, 1.0);

  // Correction range, truncated to integers (transformers' default truncate=True).
  const double max_pos = static_cast<double>(y.original_max_position_embeddings);
  double low = std::floor(correction_dim(y.beta_fast, dim, theta, max_pos));
  double high = std::ceil(correction_dim(y.beta_slow, dim, theta, max_pos));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp, as the reference does
  for (int64_t i = 0; i < half; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    // ramp 0: high frequency, keep (extrapolate); ramp 1: low frequency, interpolate.
    const double extrapolation_weight = 1.0 - ramp;
    inv_freq_[i] = inv_freq_[i] / y.factor * (1.0 - extrapolation_weight) +
                   inv_freq_[i] * extrapolation_weight;
  }
}

void Rope::apply(double* vec, int64_t position) const {
  const int64_t half = dim_ / 2;
  const double p = static_cast<double>(position);
  for (int64_t i = 0; i < half; ++i) {
    const double angle = p * inv_freq_[i];
    const double c = std::cos(angle) * attention_factor_;
    const double s = std::sin(angle) * attention_factor_;
    // Pair (a, b) rotated as the complex number a + i b times e^{i angle}.
    const int64_t ia = layout_ == RopeLayout::kInterleavedPairs ? 2 * i : i;
    const int64_t ib = layout_ == RopeLayout::kInterleavedPairs ? 2 * i + 1 : i + half;
    const double a = vec[ia];
    const double b = vec[ib];
    vec[ia] = a * c - b * s;
    vec[ib] = a * s + b * c;
  }
}

}  // namespace mla::model
