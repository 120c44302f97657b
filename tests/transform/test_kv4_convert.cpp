// mla-convert --kv-cache fp4|codebook pieces: the per-slice Hadamard rotation (block-diagonal,
// orthogonal, each block the seeded Sylvester basis, refused at a width that is not 2^k), its
// composition with a basis (slices stay slices), and the recorded metadata (kv_cache section,
// ModelOpt hf_quant_config.json).
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "quant/hadamard.hpp"
#include "transform/kv4_params.hpp"
#include "transform/kv_cache_meta.hpp"
#include "transform/reparam.hpp"

using namespace mla;
using namespace mla::transform;

namespace {

Kv4Params hand_params(const std::string& format, int layers) {
  Kv4Params p;
  p.format = format;
  p.calib = "calib.h5";
  p.c_source = "fitted";
  std::vector<double> lv(16);
  for (int i = 0; i < 16; ++i) lv[i] = -1.5 + 0.2 * i;
  for (int i = 0; i < layers; ++i) {
    Kv4LayerParams L;
    L.c_fitted = 0.19f + 0.001f * i;
    L.fp4 = quant::Fp4CacheEncoding{quant::Fp4ScaleRule::Round, L.c_fitted};
    L.codebook = quant::codebook_unit_levels(lv, 4.0);
    L.protect_bf16 = i == 0;
    p.layers.push_back(L);
  }
  return p;
}

}  // namespace

TEST(Kv4Convert, SliceRotationIsBlockDiagonalSeededHadamard) {
  const MatrixR r = kv4_slice_rotation(128, 2, 7, "test");
  EXPECT_LT((r.transpose() * r - MatrixR::Identity(128, 128)).cwiseAbs().maxCoeff(), 1e-12);
  const Eigen::MatrixXd v = quant::hadamard_basis(64, 7);
  for (int bi = 0; bi < 2; ++bi)
    for (int bj = 0; bj < 2; ++bj) {
      const MatrixR blk = r.block(bi * 64, bj * 64, 64, 64);
      if (bi == bj)
        EXPECT_EQ((blk - v).cwiseAbs().maxCoeff(), 0.0);
      else
        EXPECT_EQ(blk.cwiseAbs().maxCoeff(), 0.0);
    }
  // g = 1: the whole-width Sylvester basis.
  EXPECT_EQ((kv4_slice_rotation(64, 1, std::nullopt, "t") - MatrixR(quant::hadamard_basis(64))).cwiseAbs().maxCoeff(), 0.0);
  // Composed after a basis U: slice k of (U R)^T c is a rotation of slice k of U^T c only.
  MatrixR u = MatrixR(quant::hadamard_basis(128, 3));
  const MatrixR ur = u * r;
  Eigen::VectorXd c = Eigen::VectorXd::LinSpaced(128, -1.0, 2.0);
  const Eigen::VectorXd a = u.transpose() * c, b = ur.transpose() * c;
  for (int k = 0; k < 2; ++k) EXPECT_NEAR(a.segment(k * 64, 64).norm(), b.segment(k * 64, 64).norm(), 1e-12);
  try {
    kv4_slice_rotation(192, 2, std::nullopt, "layer 3");
    FAIL() << "a 96-wide slice was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("192 / 2 = 96"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kv4_slice_rotation(128, 3, std::nullopt, "t"), InputError);
}

TEST(Kv4Convert, KvCacheSectionAndModelOptConfig) {
  const nlohmann::json rot = {{"kind", "walsh_hadamard_per_slice"}};
  const auto f = kv4_cache_section(hand_params("fp4", 3), 512, 64, 3, rot);
  EXPECT_EQ(f["format"], "fp4_e2m1_ue8m0_g32");
  EXPECT_EQ(f["bytes_per_token_per_layer"], 400);
  EXPECT_EQ(f["bytes_per_token"], 1152 + 2 * 400);  // layer 0 protected: BF16
  EXPECT_EQ(f["protected_layers"], nlohmann::json::array({0}));
  EXPECT_NEAR(f["layers"][2]["c"].get<double>(), 0.192, 1e-6);
  EXPECT_EQ(f["rotation"]["kind"], "walsh_hadamard_per_slice");
  const auto c = kv4_cache_section(hand_params("codebook", 2), 256, 64, 2, rot);
  EXPECT_EQ(c["bytes_per_token_per_layer"], 128 + 4 + 128);
  EXPECT_EQ(c["layers"][1]["levels"].size(), 16u);
  EXPECT_NEAR(c["layers"][1]["levels"][0].get<double>(), -0.75, 1e-7);  // -1.5 / sqrt(4)
  EXPECT_EQ(hf_quant_config("fp4", "x")["quantization"]["kv_cache_quant_algo"], "MXFP4");
  EXPECT_EQ(hf_quant_config("codebook", "x")["quantization"]["kv_cache_quant_algo"], "MLA_CODEBOOK4");
  // A slice no 4-bit layout stores (d_c / g = 96) is refused naming the width.
  try {
    kv4_cache_section(hand_params("fp4", 1), 96, 64, 1, rot);
    FAIL() << "width 96 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("d_c = 96"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kv_cache_section("fp4", 512, 64, 1), InputError);  // needs its parameters
}
