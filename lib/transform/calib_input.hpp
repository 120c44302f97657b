#pragma once
// Reads what mla-convert needs from a calibration file (calib.h5, layout in io/calib_file.hpp,
// docs/formats/calib.md: written by mla-calibrate):
//   root attrs  schema = io::kCalibSchema, checkpoint_fingerprint (io::fingerprint of the input)
//   /layer_{i:02d}/pca_basis                         f64 [d_c, d_c] (columns = eigenvectors)
//   /layer_{i:02d}/qk_basis                          f64 [d_c, d_c] (columns = basis vectors)
//   /layer_{i:02d}/g{g}/{basis}/energy_fraction      f64 [g]
//   /layer_{i:02d}/g{g}/{basis}/mu                   f64 [g]
//   /layer_{i:02d}/g{g}/{basis}/mu_per_head          f64 [H, g] (optional; preferred when present)
// Everything is read once, up front, serially (the HDF5 C library is not thread-safe).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "transform/reparam.hpp"
#include "transform/tpla.hpp"

namespace mla::transform {

struct LayerCalibration {
  std::optional<MatrixR> pca_basis;  // the calibrated basis (pca_basis or qk_basis), only when requested
  SliceCorrections corrections;      // f [g], mu [H, g]
  bool mu_per_head = false;
};

struct CalibrationInput {
  std::filesystem::path path;
  std::string checkpoint_fingerprint;
  std::vector<LayerCalibration> layers;  // one per attention layer
};

// Loads layers [0, num_layers). `expected_fingerprint`: the input checkpoint's fingerprint;
// a mismatch is an InputError naming both values. g = 1 needs no corrections (f = 1, mu = 1).
// Missing groups/datasets and wrong shapes are InputErrors naming the file and object path;
// f must be finite, >= 0 and sum to 1 within 1e-6; mu finite.
// The `hadamard_seed` root attribute (the random-sign seed of the Hadamard basis the
// calibration measured f and mu under), or nullopt when the file has none.
std::optional<uint64_t> calibration_hadamard_seed(const std::filesystem::path& path);

CalibrationInput load_calibration(const std::filesystem::path& path, const std::string& expected_fingerprint,
                                  int64_t num_layers, int64_t num_heads, int64_t d_c, int g, Reparam basis);

}  // namespace mla::transform
