#pragma once
// One layer of mla-calibrate (calibrate.hpp has the method): LayerCalibrator runs the passes
// (pass 1: second moments and reservoirs; bases and energy fractions; pass 2: slicing errors,
// logit pairs and the FP8 study; mu; FP4 / Lloyd-Max) with what every layer shares in a
// CalibrationContext. Internal to mla_calibration; calibrate() runs it on worker threads.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "calibration/calibrate.hpp"
#include "io/capture.hpp"

namespace mla::calib {

// Evenly spread picks of k out of n indices (all when k >= n).
std::vector<int64_t> spread(int64_t n, int64_t k);

// What every layer's calibration shares, read-only while the layers run on worker threads.
struct CalibrationContext {
  const model::MlaConfig& cfg;
  const CalibrationOptions& opt;
  const std::vector<std::unique_ptr<io::CaptureReader>>& caps;
  const std::vector<int64_t>& n_hold;                         // held-out sequences per capture (the last ones)
  MomentMode moment;                                          // Auto resolved
  const std::vector<std::string>& run_bases;                  // bases measured (calibrated_bases)
  const std::string& mix;                                     // "hadamard" or "hadamard-block"
  const std::vector<double>& signs;                           // the Hadamard random signs
  const std::map<std::string, Eigen::MatrixXd>& fixed_bases;  // identity and the mixing basis
  int gmax;                                                   // the largest group count
  double scale;                                               // softmax scale
  // Pass-2 sequences of capture ci: (index, held-out).
  std::function<std::vector<std::pair<int64_t, bool>>(std::size_t)> pass2_picks;
};

// Calibrates `layer` from its weights `w`; warnings are appended to `warnings`.
LayerCalibration calibrate_layer(const CalibrationContext& cx, int64_t layer, model::AttentionWeights w,
                                 std::vector<std::string>& warnings);

}  // namespace mla::calib
