#include "transform/calib_input.hpp"

#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "io/calib_file.hpp"
#include "io/hdf5.hpp"

namespace mla::transform {

namespace {

std::vector<double> read_exact(const io::h5::Group& root, const std::string& path, const io::h5::Dims& want,
                               const std::string& file) {
  if (!root.exists(path)) throw InputError(file + ": calibration dataset '/" + path + "' is missing");
  // Shape first: a damaged file may declare any extent, and reading it whole would try to
  // allocate it (found by fuzz_calib_h5, docs/fuzzing.md).
  const io::h5::Dims dims = root.open(path).dims();
  if (dims != want) {
    std::string got, exp;
    for (auto d : dims) got += std::to_string(d) + ",";
    for (auto d : want) exp += std::to_string(d) + ",";
    throw InputError(file + ": calibration dataset '/" + path + "' has shape [" + got + "], expected [" + exp + "]");
  }
  std::vector<double> v = root.read<double>(path);
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw InputError(file + ": calibration dataset '/" + path + "' has a non-finite value at index " +
                       std::to_string(i));
  return v;
}

}  // namespace

std::optional<uint64_t> calibration_hadamard_seed(const std::filesystem::path& path) {
  io::h5::File f = io::h5::File::open_read(path);
  if (!f.root().has_attr("hadamard_seed")) return std::nullopt;
  return static_cast<uint64_t>(f.root().attr_int("hadamard_seed"));
}

CalibrationInput load_calibration(const std::filesystem::path& path, const std::string& expected_fingerprint,
                                  int64_t num_layers, int64_t num_heads, int64_t d_c, int g, Reparam basis) {
  const std::string file = path.string();
  io::h5::File f = io::h5::File::open_read(path);
  const io::h5::Group& root = f.root();
  if (!root.has_attr("schema") || root.attr_string("schema") != io::kCalibSchema)
    throw InputError(file + ": attribute 'schema' is '" +
                     (root.has_attr("schema") ? root.attr_string("schema") : std::string("<missing>")) +
                     "', expected '" + io::kCalibSchema + "'");
  CalibrationInput out;
  out.path = path;
  out.checkpoint_fingerprint =
      root.has_attr("checkpoint_fingerprint") ? root.attr_string("checkpoint_fingerprint") : std::string("<missing>");
  if (out.checkpoint_fingerprint != expected_fingerprint)
    throw InputError(file + ": calibration was made for checkpoint fingerprint " + out.checkpoint_fingerprint +
                     ", but the input checkpoint's fingerprint is " + expected_fingerprint);
  const auto G = static_cast<uint64_t>(g);
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string lg = io::h5::layer_group_name(i);
    if (!root.exists(lg)) throw InputError(file + ": calibration group '/" + lg + "' is missing");
    // Something else of that name (a dataset, a dangling link) is no layer group either, even
    // when nothing of the layer is read (g = 1 without a calibrated basis; fuzz_calib_h5_recipe).
    (void)root.open_group(lg);
    LayerCalibration lc;
    lc.corrections = SliceCorrections::defaults(num_heads, g);
    if (needs_calibrated_basis(basis)) {
      const auto n = static_cast<uint64_t>(d_c);
      std::vector<double> v = read_exact(root, io::calib_basis_path(i, reparam_name(basis)), {n, n}, file);
      lc.pca_basis = Eigen::Map<MatrixR>(v.data(), d_c, d_c);
    }
    if (g > 1) {
      const std::string base = lg + "/" + io::calib_slicing_group(g, reparam_name(basis));
      lc.corrections.f = read_exact(root, base + "/energy_fraction", {G}, file);
      double sum = 0;
      for (size_t k = 0; k < lc.corrections.f.size(); ++k) {
        if (lc.corrections.f[k] < 0)
          throw InputError(file + ": '/" + base + "/energy_fraction'[" + std::to_string(k) + "] = " +
                           std::to_string(lc.corrections.f[k]) + " is negative");
        sum += lc.corrections.f[k];
      }
      if (std::fabs(sum - 1.0) > 1e-6)
        throw InputError(file + ": '/" + base + "/energy_fraction' sums to " + std::to_string(sum) + ", expected 1");
      if (root.exists(base + "/mu_per_head")) {
        std::vector<double> v = read_exact(root, base + "/mu_per_head", {static_cast<uint64_t>(num_heads), G}, file);
        lc.corrections.mu = Eigen::Map<MatrixR>(v.data(), num_heads, g);
        lc.mu_per_head = true;
      } else {
        std::vector<double> mu = read_exact(root, base + "/mu", {G}, file);
        for (int64_t h = 0; h < num_heads; ++h)
          for (int k = 0; k < g; ++k) lc.corrections.mu(h, k) = mu[k];
      }
    }
    out.layers.push_back(std::move(lc));
  }
  return out;
}

}  // namespace mla::transform
