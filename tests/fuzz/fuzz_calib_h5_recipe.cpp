// Structure-aware libFuzzer target for the calib.h5 reader (docs/fuzzing.md): the input is a
// recipe (h5_recipe.hpp) for a well-formed calib.h5 with adversarial content, built in memory by
// libhdf5, then read as mla-convert reads it: calibration_hadamard_seed, load_calibration for
// a fuzzed model (layers, heads, d_c, g, basis) and, for pca/qk, make_rotation on the basis.
// The oracle is the reader's documented contract (calib_input.hpp), evaluated on the recipe:
//  - an accepted file must satisfy every rule (schema, fingerprint, every layer's datasets
//    present with the right shape, finite, f >= 0 summing to 1 within 1e-6), and the returned
//    f, mu, basis and mu_per_head flag must be the values the recipe stored;
//  - a file that satisfies every rule must be accepted (a valid calibration refused is a bug too).
// Anything other than a result or an mla::Error aborts, as do sanitizer reports.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "h5_recipe_dataset.hpp"
#include "io/calib_file.hpp"
#include "transform/calib_input.hpp"
#include "transform/reparam.hpp"

namespace {

namespace tr = mla::transform;
using fuzz::h5r::DsSpec;
using fuzz::h5r::Elem;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_calib_h5_recipe: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A d x d orthogonal matrix (row-major): a signed permutation times Givens rotations by
// fuzzed angles, so U^T U = I to rounding.
std::vector<double> orthogonal(FuzzedDataProvider& fdp, int64_t d) {
  std::vector<double> u(static_cast<size_t>(d * d), 0.0);
  std::vector<int64_t> perm(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) perm[static_cast<size_t>(i)] = i;
  for (int64_t i = d - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[fdp.ConsumeIntegralInRange<size_t>(0, static_cast<size_t>(i))]);
  for (int64_t i = 0; i < d; ++i) u[static_cast<size_t>(i * d + perm[static_cast<size_t>(i)])] = fdp.ConsumeBool() ? -1.0 : 1.0;
  const int rotations = fdp.ConsumeIntegralInRange<int>(0, 3);
  for (int r = 0; r < rotations && d >= 2; ++r) {
    const int64_t a = fdp.ConsumeIntegralInRange<int64_t>(0, d - 1), b = (a + 1) % d;
    const double t = fdp.ConsumeIntegralInRange<int>(0, 628) / 100.0, c = std::cos(t), s = std::sin(t);
    for (int64_t row = 0; row < d; ++row) {
      double& x = u[static_cast<size_t>(row * d + a)];
      double& y = u[static_cast<size_t>(row * d + b)];
      const double nx = c * x - s * y, ny = s * x + c * y;
      x = nx;
      y = ny;
    }
  }
  return u;
}

struct LayerRecipe {
  int kind = 0;  // 0 group, 1 missing, 2 a dataset in its place
  DsSpec basis, f, mu, mu_per_head;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchCleanup cleanup;
  FuzzedDataProvider fdp(data, size);
  bool changed = false;  // any deviation from a valid calibration

  // The model mla-convert would pass.
  const int64_t L = fdp.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t H = fdp.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t d_c = fdp.ConsumeIntegralInRange<int64_t>(1, 8);
  static const int gs[] = {2, 1, 4, 3};
  const int g = gs[fdp.ConsumeIntegralInRange<int>(0, 3)];
  static const tr::Reparam bases[] = {tr::Reparam::Pca, tr::Reparam::Hadamard, tr::Reparam::Identity, tr::Reparam::Qk,
                                      tr::Reparam::HadamardBlock};
  const tr::Reparam basis = bases[fdp.ConsumeIntegralInRange<int>(0, 4)];
  const std::string bname(tr::reparam_name(basis));

  fuzz::h5r::Builder b(fdp.ConsumeIntegralInRange<int>(0, 1));
  const auto schema = fuzz::h5r::pick_string_attr(fdp, mla::io::kCalibSchema, changed);
  const auto fingerprint = fuzz::h5r::pick_string_attr(fdp, "fuzz", changed);
  fuzz::h5r::write_string_attr(b, "/", "schema", schema);
  fuzz::h5r::write_string_attr(b, "/", "checkpoint_fingerprint", fingerprint);
  const int seed_kind = fdp.ConsumeIntegralInRange<int>(0, 5);  // int64, missing, double, string, uint64 max, int32
  const int64_t seed = fdp.ConsumeIntegral<int64_t>();
  switch (seed_kind) {
    case 0: b.attr_number("/", "hadamard_seed", H5T_STD_I64LE, 0, seed, true); break;
    case 2: b.attr_number("/", "hadamard_seed", H5T_IEEE_F64LE, static_cast<double>(seed) * 1e-3, 0, false); break;
    case 3: b.attr_string("/", "hadamard_seed", "5065793", false); break;
    case 4: b.attr_number("/", "hadamard_seed", H5T_STD_U64LE, 0, -1, true); break;
    case 5: b.attr_number("/", "hadamard_seed", H5T_STD_I32LE, 0, -1, true); break;
    default: break;
  }

  const int64_t file_layers = std::max<int64_t>(0, L + std::array<int64_t, 4>{0, 0, -1, 1}[fdp.ConsumeIntegralInRange<int>(0, 3)]);
  if (file_layers < L) changed = true;
  std::vector<LayerRecipe> layers(static_cast<size_t>(file_layers));
  const auto G = static_cast<uint64_t>(g);
  for (int64_t i = 0; i < file_layers; ++i) {
    LayerRecipe& lr = layers[static_cast<size_t>(i)];
    const std::string lg = mla::io::h5::layer_group_name(i);
    lr.kind = std::array<int, 8>{0, 0, 0, 0, 0, 0, 1, 2}[fdp.ConsumeIntegralInRange<int>(0, 7)];
    if (lr.kind != 0) changed = true;
    if (lr.kind == 1) continue;
    if (lr.kind == 2) {
      b.dataset(lg, Elem::F64, {}, {}, std::vector<unsigned char>(8, 0));
      continue;
    }
    b.group(lg);
    if (tr::needs_calibrated_basis(basis)) {
      const auto n = static_cast<uint64_t>(d_c);
      lr.basis = fuzz::h5r::pick_dataset(fdp, b, mla::io::calib_basis_path(i, bname), Elem::F64, {n, n},
                                         orthogonal(fdp, d_c), 0, changed);
    }
    if (g > 1) {
      const std::string base = lg + "/" + mla::io::calib_slicing_group(g, bname);
      std::vector<double> w(G);
      double total = 0;
      for (auto& x : w) total += (x = fdp.ConsumeIntegralInRange<int>(1, 100));
      for (auto& x : w) x /= total;
      lr.f = fuzz::h5r::pick_dataset(fdp, b, base + "/energy_fraction", Elem::F64, {G}, w, 0, changed);
      const int mu_kind = fdp.ConsumeIntegralInRange<int>(0, 5);  // 0, 4, 5: mu; 1: per head; 2: both; 3: neither
      std::vector<double> mu(static_cast<size_t>(H) * G);
      for (auto& x : mu) x = fdp.ConsumeIntegralInRange<int>(0, 400) / 100.0;
      if (mu_kind == 0 || mu_kind == 2 || mu_kind >= 4)
        lr.mu = fuzz::h5r::pick_dataset(fdp, b, base + "/mu", Elem::F64, {G}, std::vector<double>(mu.begin(), mu.begin() + static_cast<long>(G)), 0, changed);
      else
        lr.mu.kind = DsSpec::Missing;
      if (mu_kind == 3) changed = true;
      if (mu_kind == 1 || mu_kind == 2)
        lr.mu_per_head = fuzz::h5r::pick_dataset(fdp, b, base + "/mu_per_head", Elem::F64, {static_cast<uint64_t>(H), G}, mu, 0, changed);
      else
        lr.mu_per_head.kind = DsSpec::Missing;
      // A decoy: the statistics of another basis, which must not be read.
      if (fdp.ConsumeBool())
        b.dataset(lg + "/" + mla::io::calib_slicing_group(g, bname == "pca" ? "identity" : "pca") + "/energy_fraction",
                  Elem::F64, {G}, {}, std::vector<unsigned char>(G * 8, 0xff));
    }
  }
  const auto& path = b.write_image();

  // ---- calibration_hadamard_seed ----
  try {
    const std::optional<uint64_t> s = tr::calibration_hadamard_seed(path);
    if (seed_kind == 1 && s) fail("hadamard_seed", "returned a seed for a file without one");
    if (seed_kind == 0 && (!s || *s != static_cast<uint64_t>(seed))) fail("hadamard_seed", "wrong value");
  } catch (const mla::Error& e) {
    if (seed_kind == 0 || seed_kind == 1) fail("hadamard_seed refused a valid file", e.what());
  }

  // ---- load_calibration: the rules, evaluated on the recipe ----
  std::string broken;  // the first rule the recipe breaks (empty: the file is valid)
  if (!fuzz::h5r::reads_as(schema, mla::io::kCalibSchema)) broken = "schema";
  else if (!fuzz::h5r::reads_as(fingerprint, "fuzz")) broken = "fingerprint";
  else if (file_layers < L) broken = "layer count";
  for (int64_t i = 0; i < L && broken.empty(); ++i) {
    const LayerRecipe& lr = layers[static_cast<size_t>(i)];
    const auto n = static_cast<uint64_t>(d_c);
    if (lr.kind != 0) broken = "layer group";
    else if (tr::needs_calibrated_basis(basis) && !lr.basis.readable_as({n, n})) broken = "basis";
    else if (g > 1) {
      double sum = 0;
      bool negative = false;
      for (double x : lr.f.stored) {
        negative |= x < 0;
        sum += x;
      }
      if (!lr.f.readable_as({G}) || negative || std::fabs(sum - 1.0) > 1e-6) broken = "energy_fraction";
      else if (lr.mu_per_head.link_exists() ? !lr.mu_per_head.readable_as({static_cast<uint64_t>(H), G})
                                            : !lr.mu.readable_as({G}))
        broken = "mu";
    }
  }
  tr::CalibrationInput c;
  try {
    c = tr::load_calibration(path, "fuzz", L, H, d_c, g, basis);
  } catch (const mla::Error& e) {
    if (broken.empty()) fail("refused a valid calibration", e.what());
    if (!changed) fail("refused an unchanged recipe", e.what());
    return 0;
  }
  if (!broken.empty()) fail("accepted a calibration that breaks a rule", broken);
  if (c.layers.size() != static_cast<size_t>(L)) fail("layers", std::to_string(c.layers.size()));
  for (int64_t i = 0; i < L; ++i) {
    const auto& got = c.layers[static_cast<size_t>(i)];
    const LayerRecipe& lr = layers[static_cast<size_t>(i)];
    if (got.corrections.mu.rows() != H || got.corrections.mu.cols() != g) fail("mu shape", std::to_string(i));
    if (g > 1) {
      if (got.corrections.f != lr.f.stored) fail("f differs from the file", std::to_string(i));
      if (got.mu_per_head != lr.mu_per_head.link_exists()) fail("mu_per_head flag", std::to_string(i));
      for (int64_t h = 0; h < H; ++h)
        for (int k = 0; k < g; ++k) {
          const double want = got.mu_per_head ? lr.mu_per_head.stored[static_cast<size_t>(h * g + k)] : lr.mu.stored[static_cast<size_t>(k)];
          if (got.corrections.mu(h, k) != want) fail("mu differs from the file", std::to_string(i));
        }
    } else if (got.corrections.f != std::vector<double>{1.0} || got.corrections.mu.size() != H || got.corrections.mu(0, 0) != 1.0) {
      fail("g = 1 corrections", std::to_string(i));
    }
    if (tr::needs_calibrated_basis(basis)) {
      if (!got.pca_basis || got.pca_basis->rows() != d_c || got.pca_basis->cols() != d_c) fail("basis shape", std::to_string(i));
      for (int64_t k = 0; k < d_c * d_c; ++k)
        if (got.pca_basis->data()[k] != lr.basis.stored[static_cast<size_t>(k)]) fail("basis differs from the file", std::to_string(i));
      // mla-convert's next step: an accepted basis must be orthogonal, a non-orthogonal one an InputError.
      try {
        const mla::MatrixR u = tr::make_rotation(basis, d_c, std::nullopt, &*got.pca_basis, "fuzz layer");
        const double dev = (u.transpose() * u - mla::MatrixR::Identity(d_c, d_c)).cwiseAbs().maxCoeff();
        if (!(dev <= 1e-8)) fail("make_rotation accepted a non-orthogonal basis", std::to_string(dev));
      } catch (const mla::Error& e) {
        if (!changed) fail("make_rotation refused an orthogonal basis", e.what());
      }
    } else if (got.pca_basis) {
      fail("basis read although not requested", std::to_string(i));
    }
  }
  return 0;
}
