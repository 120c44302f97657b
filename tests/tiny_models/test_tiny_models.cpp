// The C++ float64 dense forward reproduces transformers (DeepseekV2/V3 classes, float32,
// eager attention) on the shipped tiny trained models: per-layer attention outputs given
// transformers' own attention inputs, per-layer attention inputs along the C++ forward, and
// final logits. This pins RoPE pair layout, YaRN frequencies and mscale, softmax scale and
// weight layouts against an implementation we did not write.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "io/capture.hpp"
#include "io/checkpoint.hpp"
#include "io/mla_weights.hpp"
#include "model/dense_forward.hpp"
#include "model/metrics.hpp"

namespace {

using mla::MatrixR;

// transformers runs in float32: its outputs carry ~1e-6 relative rounding; the required
// agreement is relative L2 <= 1e-4 against them.
constexpr double kAttnOutRelL2 = 1e-4;
constexpr double kHiddenRelL2 = 1e-4;
constexpr double kLogitsRelL2 = 1e-4;

std::string model_dir(const std::string& name) { return std::string(MLA_SOURCE_DIR) + "/datasets/" + name; }

MatrixR to_matrix(const std::vector<float>& v, int64_t rows, int64_t cols) {
  MatrixR m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = v[static_cast<size_t>(i)];
  return m;
}

mla::model::ErrorMetrics compare(const MatrixR& y, const std::vector<float>& ref) {
  std::vector<double> r(ref.begin(), ref.end());
  return mla::model::compare(std::span<const double>(y.data(), static_cast<size_t>(y.size())), r);
}

class TinyModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModel, MatchesTransformersPerLayerAndLogits) {
  const std::string name = GetParam();
  const auto ckpt = mla::io::Checkpoint::open(model_dir(name));
  const auto model = mla::io::load_dense_model(ckpt);
  const mla::io::CaptureReader ref(model_dir(name) + "/reference.h5");
  ASSERT_EQ(ref.meta().model_type, model.cfg.model_type);
  ASSERT_EQ(ref.meta().num_layers, model.cfg.num_hidden_layers);
  ASSERT_EQ(ref.meta().hidden_size, model.cfg.hidden_size);
  const auto info = ref.group_info("reference");
  ASSERT_TRUE(info.has_attn_out);
  ASSERT_EQ(info.vocab, model.cfg.vocab_size);
  ASSERT_GE(info.sequences, 1);
  const int64_t T = info.seq_len, D = model.cfg.hidden_size, V = model.cfg.vocab_size;
  const int64_t L = model.cfg.num_hidden_layers;
  std::vector<double> worst_attn(static_cast<size_t>(L), 0.0), worst_hidden(static_cast<size_t>(L), 0.0);
  double worst_logits = 0.0;
  for (int64_t s = 0; s < info.sequences; ++s) {
    const auto tokens = ref.tokens("reference", s);
    mla::model::ForwardTrace tr;
    tr.want_hidden = true;
    const MatrixR logits = mla::model::dense_forward(model, tokens, &tr);
    for (int64_t i = 0; i < L; ++i) {
      // Attention alone, on transformers' own input: isolates this layer's attention math.
      const auto h_ref = ref.hidden("reference", i, s);
      const MatrixR out = mla::model::attention_naive(model.cfg, model.layers[static_cast<size_t>(i)].attn,
                                                      to_matrix(h_ref, T, D), 0);
      const auto ea = compare(out, ref.attn_out("reference", i, s));
      ASSERT_TRUE(ea.nonfinite_match) << name << " layer " << i << ": " << ea.summary();
      EXPECT_LE(ea.rel_l2, kAttnOutRelL2) << name << " layer " << i << " attn_out: " << ea.summary();
      // Attention input along the whole C++ forward (errors of earlier layers included).
      const auto eh = compare(tr.hidden[static_cast<size_t>(i)], h_ref);
      EXPECT_LE(eh.rel_l2, kHiddenRelL2) << name << " layer " << i << " hidden: " << eh.summary();
      worst_attn[static_cast<size_t>(i)] = std::max(worst_attn[static_cast<size_t>(i)], ea.rel_l2);
      worst_hidden[static_cast<size_t>(i)] = std::max(worst_hidden[static_cast<size_t>(i)], eh.rel_l2);
    }
    const auto el = compare(logits, ref.logits("reference", s));
    ASSERT_EQ(logits.cols(), V);
    EXPECT_LE(el.rel_l2, kLogitsRelL2) << name << " logits seq " << s << ": " << el.summary();
    worst_logits = std::max(worst_logits, el.rel_l2);
  }
  // The figures docs/tiny-models.md quotes.
  for (int64_t i = 0; i < L; ++i)
    std::printf("%s layer %lld: worst rel L2 attn_out %.3e, hidden %.3e\n", name.c_str(), static_cast<long long>(i),
                worst_attn[static_cast<size_t>(i)], worst_hidden[static_cast<size_t>(i)]);
  std::printf("%s logits: worst rel L2 %.3e\n", name.c_str(), worst_logits);
}

// The comparison can fail: a model with the RoPE pair layout flipped must miss the
// tolerance by far on the trained weights (guards against a vacuous fixture).
TEST_P(TinyModel, WrongRopeLayoutIsDetected) {
  const std::string name = GetParam();
  const auto ckpt = mla::io::Checkpoint::open(model_dir(name));
  auto model = mla::io::load_dense_model(ckpt);
  model.cfg.rope_interleave = !model.cfg.rope_interleave;
  const mla::io::CaptureReader ref(model_dir(name) + "/reference.h5");
  const int64_t T = ref.group_info("reference").seq_len, D = model.cfg.hidden_size;
  const MatrixR out = mla::model::attention_naive(model.cfg, model.layers[0].attn,
                                                  to_matrix(ref.hidden("reference", 0, 0), T, D), 0);
  EXPECT_GT(compare(out, ref.attn_out("reference", 0, 0)).rel_l2, 100 * kAttnOutRelL2);
}

// Trained, not random: next-byte prediction on the fixture's held-out bytes is far better
// than uniform over 256 bytes (8 bits).
TEST_P(TinyModel, PredictsHeldOutBytes) {
  const std::string name = GetParam();
  const auto ckpt = mla::io::Checkpoint::open(model_dir(name));
  const auto model = mla::io::load_dense_model(ckpt);
  const mla::io::CaptureReader ref(model_dir(name) + "/reference.h5");
  std::vector<std::vector<int32_t>> windows;
  for (int64_t s = 0; s < ref.group_info("reference").sequences; ++s) windows.push_back(ref.tokens("reference", s));
  const auto r = mla::model::evaluate_windows(model, windows, 2);
  EXPECT_LT(r.bits_per_token(), 3.0);
  EXPECT_GT(r.bits_per_token(), 0.1);
}

INSTANTIATE_TEST_SUITE_P(Shipped, TinyModel, ::testing::Values("tiny-v2", "tiny-v3"),
                         [](const auto& info) { return info.param == "tiny-v2" ? std::string("V2") : std::string("V3"); });

TEST(NextTokenNll, UniformLogitsGiveLogV) {
  const int64_t V = 7;
  const MatrixR logits = MatrixR::Constant(5, V, 0.3);
  const std::vector<int32_t> toks{1, 2, 3, 4, 6};
  const auto r = mla::model::next_token_nll(logits, toks);
  EXPECT_EQ(r.predicted, 4);
  EXPECT_NEAR(r.nll_sum, 4 * std::log(7.0), 1e-12);
}

TEST(NextTokenNll, PicksTheTargetColumnOfThePreviousRow) {
  MatrixR logits = MatrixR::Zero(2, 3);
  logits(0, 2) = std::log(2.0);  // row 0 predicts token 1: p = 1/(1+1+2)
  const std::vector<int32_t> toks{0, 1};
  EXPECT_NEAR(mla::model::next_token_nll(logits, toks).nll_sum, std::log(4.0), 1e-12);
  const std::vector<int32_t> bad{0, 3};
  EXPECT_THROW(mla::model::next_token_nll(logits, bad), mla::InputError);
}

TEST(DenseForward, RejectsOutOfVocabularyTokens) {
  const auto ckpt = mla::io::Checkpoint::open(model_dir("tiny-v2"));
  const auto model = mla::io::load_dense_model(ckpt);
  const std::vector<int32_t> toks{65, 260};
  EXPECT_THROW(mla::model::dense_forward(model, toks), mla::InputError);
}

TEST(DenseForward, RefusesMoeLayers) {
  auto cfg = mla::io::Checkpoint::open(model_dir("tiny-v2")).config();
  cfg.first_k_dense_replace = 1;  // layers 1.. would be MoE (n_routed_experts = 4)
  EXPECT_THROW(mla::model::load_dense_model(cfg, [](const std::string&) { return MatrixR(); }), mla::InputError);
}

}  // namespace
