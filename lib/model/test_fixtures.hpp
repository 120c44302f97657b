#pragma once
// Test fixtures of the float64 reference: small layer configs of both families and
// deterministic random weights. Kept in the library (not tests/) because the model, transform,
// calibration and verify tests all build layers from them.
#include <cstdint>

#include "core/tensor.hpp"
#include "model/attention_reference.hpp"
#include "model/config.hpp"

namespace mla::model {

// Deterministic random weights for tests (same bits on every platform: own uniform mapping
// of a mt19937_64 stream). Entries are uniform in [-a, a] with a = sqrt(3 / fan_in), so
// activations stay O(1); RMSNorm gammas are uniform in [0.5, 1.5].
AttentionWeights random_attention_weights(const MlaConfig& cfg, uint64_t seed);
// Deterministic random matrix, entries uniform in [-amplitude, amplitude].
MatrixR random_matrix(int64_t rows, int64_t cols, uint64_t seed, double amplitude = 1.0);

// Small configs shaped like the two families, for tests (documented in docs/math.md). Not the
// shipped trained models (datasets/tiny-v2, tiny-v3) nor mla-synth's presets of those names:
//  V2-style: no q_lora, plain RoPE, rope_interleave pairs;
//  V3-style: q_lora, YaRN (factor 40, mscale = mscale_all_dim = 1, original 64 positions).
MlaConfig test_config_v2_style();
MlaConfig test_config_v3_style();

}  // namespace mla::model
