#pragma once
// Synthetic captures (schema mla-capture/1) for tests and throughput measurements: Gaussian
// rows with a chosen per-channel scale, written sequence by sequence (memory O(T * width)).
//
// Values: N(0, 1) quantiles z_j = Phi^-1((j + 0.5) / 65536) (rescaled to unit variance) picked
// by a counter-based hash of (seed, layer, dataset, sequence, element), times the channel's
// scale; so any sequence can be generated on its own (two threads generate, one writes).
// BF16 captures hold the bfloat16 (round to nearest even) of the same values.
#include <cstdint>
#include <string>
#include <vector>

#include "io/capture.hpp"
#include "model/config.hpp"

namespace mla::calib {

struct SyntheticCaptureSpec {
  int64_t sequences = 4, seq_len = 64, num_layers = 1;
  bool latent = true;            // latent + k_pe datasets, else hidden [S, T, D]
  std::vector<double> channel_scale;  // latent: per-channel std (d_c entries); empty: all 1
  uint64_t seed = 1;
  std::string fingerprint;       // written as checkpoint_fingerprint when non-empty
  io::StoredType dtype = io::StoredType::F32;  // F32 or BF16
};

void write_synthetic_capture(const std::string& path, const model::MlaConfig& cfg,
                             const SyntheticCaptureSpec& spec);

}  // namespace mla::calib
