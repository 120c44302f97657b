// A latent width that is not a power of two (kv_lora_rank 96): calibration runs everything
// that is defined (identity, PCA, qk, FP4, Lloyd-Max), marks the Sylvester Hadamard basis
// unavailable with the reason, and calibrates the block-diagonal Hadamard in its place, which
// mla-convert's --reparam hadamard-block then reads from calib.h5.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/scratch_dir.hpp"
#include "calibration/calibrate.hpp"
#include "calibration/synthetic.hpp"
#include "core/error.hpp"
#include "io/hdf5.hpp"
#include "model/attention_reference.hpp"
#include "model/test_fixtures.hpp"
#include "transform/calib_input.hpp"
#include "transform/reparam.hpp"

using namespace mla;
using namespace mla::calib;
namespace fs = std::filesystem;

namespace {
model::MlaConfig cfg96() {
  model::MlaConfig c = model::test_config_v2_style();
  c.kv_lora_rank = 96;
  return c;
}
WeightsProvider gamma_one(const model::MlaConfig& cfg) {
  return [cfg](int64_t) {
    model::AttentionWeights w;
    w.kv_a_layernorm = VectorD::Ones(cfg.kv_lora_rank);
    w.kv_b_proj = MatrixR::Zero(cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank);
    return w;
  };
}
}  // namespace

TEST(NonPowerOfTwoLatent, CalibratesEverythingDefinedAndTheBlockHadamard) {
  const auto cfg = cfg96();
  const mla::test::ScratchDir scratch("mla_calib96");
  const fs::path dir = scratch.path();
  const fs::path cap = dir / "c96.h5";
  SyntheticCaptureSpec spec;
  spec.sequences = 20;
  spec.seq_len = 256;
  write_synthetic_capture(cap.string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {cap.string()};
  const CalibrationResult r = calibrate(cfg, gamma_one(cfg), "fp96", opt);

  EXPECT_NE(r.hadamard_unavailable.find("96"), std::string::npos) << r.hadamard_unavailable;
  EXPECT_NE(r.hadamard_unavailable.find("power of two"), std::string::npos);
  EXPECT_EQ(r.mixing_basis, "hadamard-block");
  ASSERT_EQ(r.layers.size(), 1u);
  const auto& L = r.layers[0];
  for (int g : {2, 4, 8}) {
    const auto& per_basis = L.slices.at(g);
    EXPECT_EQ(per_basis.count("hadamard"), 0u);
    for (const char* b : {"identity", "pca", "hadamard-block"}) {
      ASSERT_EQ(per_basis.count(b), 1u) << b;
      double sum = 0;
      for (double f : per_basis.at(b).f) sum += f;
      EXPECT_NEAR(sum, 1.0, 1e-12) << b << " g=" << g;
    }
  }
  EXPECT_EQ(L.pca_basis.rows(), 96);
  EXPECT_GT(L.fp4.values, 0);                 // FP4 constant fitted on block-rotated rows
  EXPECT_GT(L.fp4.c_rounded, 0.0);
  EXPECT_EQ(L.codebook.levels.size(), 16u);   // Lloyd-Max

  const fs::path h5 = dir / "calib96.h5";
  write_calib_h5(r, h5.string());
  // What mla-convert --reparam hadamard-block reads (f; mu needs a capture with h), and the
  // reason Sylvester's basis is missing.
  const io::h5::File f = io::h5::File::open_read(h5);
  EXPECT_TRUE(f.root().exists("layer_00/g2/hadamard-block/energy_fraction"));
  EXPECT_FALSE(f.root().exists("layer_00/g2/hadamard"));
  EXPECT_EQ(f.root().attr_string("mixing_basis"), "hadamard-block");
  EXPECT_NE(f.root().attr_string("hadamard_unavailable").find("not a power of two"), std::string::npos);
}

TEST(NonPowerOfTwoLatent, ConvertRotationsForWidth96) {
  const MatrixR u = transform::make_rotation(transform::Reparam::HadamardBlock, 96, 3, nullptr, "layer 0");
  EXPECT_LT((u.transpose() * u - MatrixR::Identity(96, 96)).cwiseAbs().maxCoeff(), 1e-14);
  try {
    transform::make_rotation(transform::Reparam::Hadamard, 96, 3, nullptr, "layer 0");
    FAIL() << "hadamard accepted d_c = 96";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("hadamard-block"), std::string::npos) << e.what();
  }
}
