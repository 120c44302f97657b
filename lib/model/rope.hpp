#pragma once
// Rotary position embedding for the d_r RoPE dimensions of MLA, including YaRN, matching the
// transformers DeepseekV2/V3 rotary embeddings (docs/math.md has the derivation):
//   inv_freq[i] = theta^(-2i/d_r), i < d_r/2; under YaRN blended between extrapolation
//   (inv_freq) and interpolation (inv_freq / factor) by a linear ramp over the correction
//   range [floor(low), ceil(high)] from beta_fast / beta_slow at original_max_position_embeddings;
//   cos and sin are multiplied by the attention factor (mscale ratio, transformers'
//   `attention_scaling`), so q_pe and k_pe each carry it once.
// Pair layout: rope_interleave (DeepSeek checkpoints) rotates the pairs (2i, 2i+1) by angle
// pos*inv_freq[i]; half split (rope_interleave = false) rotates the pairs (i, i + d_r/2).
// apply() writes the result back in the input coordinate order (see docs/math.md for why this
// gives the same attention as transformers' de-interleave + rotate_half).
#include <cstdint>
#include <optional>
#include <vector>

#include "model/config.hpp"

namespace mla::model {

enum class RopeLayout { kInterleavedPairs, kHalfSplit };

class Rope {
 public:
  explicit Rope(const MlaConfig& cfg);
  Rope(int64_t dim, double theta, const std::optional<YarnScaling>& yarn, RopeLayout layout);

  int64_t dim() const { return dim_; }
  RopeLayout layout() const { return layout_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }  // [dim/2]
  double attention_factor() const { return attention_factor_; }

  // Rotates vec[0..dim) in place for `position`.
  void apply(double* vec, int64_t position) const;

 private:
  int64_t dim_;
  RopeLayout layout_;
  std::vector<double> inv_freq_;
  double attention_factor_ = 1.0;
};

// 0.1 * m * ln(scale) + 1, or 1 when scale <= 1 (DeepSeek's yarn_get_mscale).
double yarn_get_mscale(double scale, double m);

}  // namespace mla::model
