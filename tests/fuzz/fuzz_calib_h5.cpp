// libFuzzer target: arbitrary bytes as calib.h5 -> calibration_hadamard_seed and
// load_calibration (the reader mla-convert uses) for every basis. Any outcome other than a
// result or an mla::Error (a crash, a sanitizer report, another exception) is a bug; so is
// an accepted calibration that breaks the documented checks (f sums to 1, finite values).
#include <cmath>
#include <cstdlib>

#include "core/error.hpp"
#include "fuzz_hdf5_common.hpp"
#include "transform/calib_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchCleanup cleanup;
  const auto& path = fuzz::write_input(data, size);
  try {
    (void)mla::transform::calibration_hadamard_seed(path);
  } catch (const mla::Error&) {
  }
  for (auto basis : {mla::transform::Reparam::Pca, mla::transform::Reparam::Hadamard}) {
    try {
      const auto c = mla::transform::load_calibration(path, "fuzz", 2, 2, 8, 2, basis);
      if (c.layers.size() != 2) std::abort();
      for (const auto& l : c.layers) {
        double sum = 0;
        for (double f : l.corrections.f) sum += f;
        if (!(std::fabs(sum - 1.0) <= 1e-6) || !l.corrections.mu.allFinite()) std::abort();
        if (basis == mla::transform::Reparam::Pca && (!l.pca_basis || l.pca_basis->rows() != 8)) std::abort();
      }
    } catch (const mla::Error&) {
    }
  }
  return 0;
}
