#pragma once
// Synthetic captures (schema mla-capture/1) for tests and throughput measurements: Gaussian
// rows with a chosen per-channel scale, written sequence by sequence (memory O(T * width)).
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace mla::calib {

struct SyntheticCaptureSpec {
  int64_t sequences = 4, seq_len = 64, num_layers = 1;
  bool latent = true;            // latent + k_pe datasets, else hidden [S, T, D]
  std::vector<double> channel_scale;  // latent: per-channel std (d_c entries); empty: all 1
  uint64_t seed = 1;
  std::string fingerprint;       // written as checkpoint_fingerprint when non-empty
};

void write_synthetic_capture(const std::string& path, const model::MlaConfig& cfg,
                             const SyntheticCaptureSpec& spec);

}  // namespace mla::calib
