// verify-decode on the shipped trained tiny-v2 model through the CPU twins: an exact
// conversion passes, latent slicing is reported as the approximation it is, and the manifest
// and fingerprint checks catch a tampered or mismatched conversion.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.hpp"
#include "io/converted_checkpoint.hpp"
#include "verify_fixture.hpp"

using namespace verify_test;
using mla::transform::NormMode;
using mla::transform::Reparam;

// BF16 kernels vs float64 (SPEC section 5).
constexpr double kKernelRelL2 = 8e-3;
// Converted weights are cast to BF16 once: the float64 path of an exact conversion is within
// a few BF16 ulps of the original.
constexpr double kBf16WeightRelL2 = 3e-3;

TEST(VerifyDecode, IdentityTp1MatchesOriginal) {
  auto o = options(convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx));
  const auto rep = mla::verify::verify_decode(o);
  ASSERT_EQ(rep.layers.size(), 2u);
  for (const auto& l : rep.layers) {
    EXPECT_LT(l.kernel_vs_f64_path.rel_l2, kKernelRelL2) << "layer " << l.layer;
    EXPECT_LT(l.f64_path_vs_original.rel_l2, kBf16WeightRelL2) << "layer " << l.layer;
    EXPECT_TRUE(l.pass);
    EXPECT_GT(l.converted_vs_original.rel_l2, 0.0);  // bf16 cache and weights: not bit-equal
  }
  EXPECT_TRUE(rep.pass);
  std::printf("[figure] tp=1 identity: layer 0 rel_l2 %.3e, layer 5 rel_l2 %.3e\n",
              rep.layers[0].converted_vs_original.rel_l2, rep.layers[1].converted_vs_original.rel_l2);
}

TEST(VerifyDecode, HeadParallelTp2IsExactAndHadamardLatentSlicingIsNot) {
  // g = 1: heads split across ranks, no latent slicing -> same function as the original.
  auto hp = options(convert("tp2g1", 2, 1, Reparam::Hadamard, NormMode::Approx));
  const auto rep_hp = mla::verify::verify_decode(hp);
  for (const auto& l : rep_hp.layers) EXPECT_LT(l.f64_path_vs_original.rel_l2, kBf16WeightRelL2) << l.layer;
  EXPECT_TRUE(rep_hp.pass);

  // g = 2: per-slice softmax is an approximation; with default thresholds it must FAIL, and the
  // kernel must still agree with the float64 TPLA path.
  auto tpla = options(convert("tp2g2", 2, 2, Reparam::Hadamard, NormMode::Exact));
  const auto rep = mla::verify::verify_decode(tpla);
  EXPECT_FALSE(rep.pass);
  for (const auto& l : rep.layers) {
    EXPECT_GT(l.f64_path_vs_original.rel_l2, 1e-2) << l.layer;
    EXPECT_LT(l.kernel_vs_f64_path.rel_l2, kKernelRelL2) << l.layer;
  }
  std::printf("[figure] tp=2 g=2 hadamard exact-norm: layer 0 rel_l2 %.3e, layer 5 rel_l2 %.3e\n",
              rep.layers[0].converted_vs_original.rel_l2, rep.layers[1].converted_vs_original.rel_l2);
}

TEST(VerifyDecode, PerplexityEndToEnd) {
  auto o = options(convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx));
  o.perplexity = true;
  o.layers = {0};
  const auto rep = mla::verify::verify_decode(o);
  ASSERT_TRUE(rep.perplexity.ran);
  EXPECT_EQ(rep.perplexity.predicted, o.sequences * (o.decode - 1));
  EXPECT_GT(rep.perplexity.original_bits_per_byte, 0.0);
  // Exact conversion: perplexity moves only by BF16 rounding.
  EXPECT_NEAR(rep.perplexity.converted_bits_per_byte, rep.perplexity.original_bits_per_byte, 0.02);
}

TEST(VerifyDecode, TamperedOutputIsCaughtByTheManifest) {
  const fs::path src = convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx);
  const fs::path bad = work_dir() / "tampered";
  fs::remove_all(bad);
  fs::copy(src, bad, fs::copy_options::recursive);
  {
    std::fstream f(bad / "rank-00-of-01" / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put('x');
  }
  try {
    mla::io::check_manifest(bad, tiny_v2());
    FAIL() << "expected a VerificationError";
  } catch (const mla::VerificationError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
}

TEST(VerifyDecode, ConversionOfAnotherCheckpointIsRejected) {
  const fs::path src = convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx);
  EXPECT_THROW(mla::io::check_manifest(src, fs::path(MLA_SOURCE_DIR) / "datasets/tiny-v3"),
               mla::VerificationError);
}

TEST(VerifyDecode, BadOptionsNameTheField) {
  auto o = options(convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx));
  o.prefill = 100;  // capture sequences have 40 tokens
  try {
    mla::verify::verify_decode(o);
    FAIL();
  } catch (const mla::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--prefill"), std::string::npos) << e.what();
  }
  o = options(convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx));
  o.layers = {9};
  EXPECT_THROW(mla::verify::verify_decode(o), mla::InputError);
}
