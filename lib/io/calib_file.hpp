#pragma once
// The layout of calib.h5 (docs/formats/calib.md), spelled once: mla-calibrate's writer
// (calibration/calib_file_writer.cpp) and mla-convert's reader (transform/calib_input.cpp)
// both build their object paths here, so the two cannot drift apart.
//   root attrs  schema = kCalibSchema, checkpoint_fingerprint, hadamard_seed, ...
//   /layer_{i:02d}/{basis}_basis                 f64 [d_c, d_c]  (basis: pca, qk)
//   /layer_{i:02d}/g{g}/{basis}/energy_fraction  f64 [g], mu f64 [g], mu_per_head f64 [H, g], ...
#include <cstdint>
#include <string>
#include <string_view>

#include "io/hdf5.hpp"

namespace mla::io {

inline constexpr const char* kCalibSchema = "mla-calib/1";

// "layer_03/pca_basis": the calibrated basis `basis` ("pca", "qk") of one layer.
inline std::string calib_basis_path(int64_t layer, std::string_view basis) {
  std::string s = h5::layer_group_name(layer);
  s += '/';
  s += basis;
  s += "_basis";
  return s;
}
// "g4": the statistics of slicing into g groups (also the key of the JSON summary).
inline std::string calib_group_name(int g) {
  std::string s(1, 'g');  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "g" + std::string
  s += std::to_string(g);
  return s;
}
// "g4/pca": the group of one slicing (g groups) measured under `basis`, relative to the layer.
inline std::string calib_slicing_group(int g, std::string_view basis) {
  std::string s = calib_group_name(g);
  s += '/';
  s += basis;
  return s;
}

}  // namespace mla::io
