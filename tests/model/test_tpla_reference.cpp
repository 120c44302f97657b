// TPLA reference: exact cases (g = 1 head-parallel TP; all latent energy in one slice with the
// exact norm; PD separation with no decode rows) and a genuinely approximate case whose error
// must be visible, plus the slicing's input checks.
#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <string>

#include "core/error.hpp"
#include "model/attention_reference.hpp"
#include "model/metrics.hpp"
#include "model/test_fixtures.hpp"
#include "model/tpla_reference.hpp"

namespace mla::model {
namespace {

constexpr double kExactTol = 1e-12;    // cases where TPLA is mathematically exact
constexpr double kEpsEffect = 1e-5;    // approx norm: eps enters once per slice, not per d_c

double rel_l2(const MatrixR& y, const MatrixR& r) {
  return compare(std::span<const double>(y.data(), y.size()),
                 std::span<const double>(r.data(), r.size()))
      .rel_l2;
}

TEST(TplaReference, PlacementIsContiguous) {
  const MlaConfig cfg = test_config_v3_style();  // H 4, d_c 32
  TplaSlicing s;
  s.tp = 4;
  s.groups = 2;
  const TplaRankPlacement p3 = tpla_rank_placement(cfg, s, 3);
  EXPECT_EQ(p3.group, 1);
  EXPECT_EQ(p3.head_begin, 2);
  EXPECT_EQ(p3.head_end, 4);
  EXPECT_EQ(p3.latent_begin, 16);
  EXPECT_EQ(p3.latent_end, 32);
  const TplaRankPlacement p1 = tpla_rank_placement(cfg, s, 1);
  EXPECT_EQ(p1.group, 0);
  EXPECT_EQ(p1.head_begin, 2);
}

TEST(TplaReference, HeadParallelOnlyIsExact) {
  for (const MlaConfig& cfg : {test_config_v2_style(), test_config_v3_style()}) {
    const AttentionWeights w = random_attention_weights(cfg, 31);
    const MatrixR h = random_matrix(10, cfg.hidden_size, 32);
    for (int64_t tp : {1, 2, 4}) {
      TplaSlicing s;
      s.tp = tp;
      s.groups = 1;
      s.norm = NormMode::Approx;  // g = 1: the "local" norm is the global one
      const TplaResult r = tpla_attention(cfg, w, h, s, 3);
      ASSERT_EQ(static_cast<int64_t>(r.partial.size()), tp);
      EXPECT_LE(rel_l2(r.out, attention_naive(cfg, w, h, 3)), kExactTol) << "tp=" << tp;
    }
  }
}

// Zero the latent rows of kv_a_proj outside slice 0: c_k = 0 for k > 0, so slice 0's partial
// logit is the whole content logit and the other slices contribute exactly zero.
TEST(TplaReference, AllEnergyInOneSliceIsExact) {
  const MlaConfig cfg = test_config_v3_style();
  AttentionWeights w = random_attention_weights(cfg, 33);
  const MatrixR h = random_matrix(9, cfg.hidden_size, 34);
  for (int64_t g : {2, 4}) {
    AttentionWeights wz = w;
    const int64_t width = cfg.kv_lora_rank / g;
    wz.kv_a_proj_with_mqa.middleRows(width, cfg.kv_lora_rank - width).setZero();
    const MatrixR ref = attention_naive(cfg, wz, h);
    TplaSlicing s;
    s.tp = g;
    s.groups = g;
    s.norm = NormMode::Exact;
    EXPECT_LE(rel_l2(tpla_attention(cfg, wz, h, s).out, ref), kExactTol) << "g=" << g;
    s.norm = NormMode::Approx;
    s.f.assign(static_cast<size_t>(g), 0.0);
    s.f[0] = 1.0;  // all energy in slice 0: sqrt(g f_0) rescales the local RMS to the global one
    EXPECT_LE(rel_l2(tpla_attention(cfg, wz, h, s).out, ref), kEpsEffect) << "g=" << g;
    // the same slicing on the unmodified weights is visibly approximate (test can fail)
    EXPECT_GT(rel_l2(tpla_attention(cfg, w, h, s).out, attention_naive(cfg, w, h)), 1e-3);
  }
}

// With W_UK = 0 only the replicated RoPE logit remains, so every slice computes the same
// softmax and the sum over slices of W_UV[:, k] o_lat_k is the full value path: exact for any g.
// This pins the per-slice column bookkeeping of W_UV and o_proj.
TEST(TplaReference, NoContentLogitIsExactForAnyG) {
  const MlaConfig cfg = test_config_v3_style();
  AttentionWeights w = random_attention_weights(cfg, 39);
  const int64_t stride = cfg.qk_nope_head_dim + cfg.v_head_dim;
  for (int64_t hd = 0; hd < cfg.num_heads; ++hd) {
    w.kv_b_proj.middleRows(hd * stride, cfg.qk_nope_head_dim).setZero();
  }
  const MatrixR h = random_matrix(8, cfg.hidden_size, 40);
  const MatrixR ref = attention_naive(cfg, w, h, 11);
  for (int64_t g : {2, 4}) {
    TplaSlicing s;
    s.tp = 4;
    s.groups = g;
    s.norm = NormMode::Exact;
    EXPECT_LE(rel_l2(tpla_attention(cfg, w, h, s, 11).out, ref), kExactTol) << "g=" << g;
  }
}

TEST(TplaReference, SlicedErrorIsVisibleAndMuMatters) {
  const MlaConfig cfg = test_config_v2_style();
  const AttentionWeights w = random_attention_weights(cfg, 35);
  const MatrixR h = random_matrix(12, cfg.hidden_size, 36);
  const MatrixR ref = attention_naive(cfg, w, h);
  TplaSlicing s;
  s.tp = 2;
  s.groups = 2;
  s.norm = NormMode::Exact;
  const double err = rel_l2(tpla_attention(cfg, w, h, s).out, ref);
  s.norm = NormMode::Approx;
  const double err_approx = rel_l2(tpla_attention(cfg, w, h, s).out, ref);
  s.norm = NormMode::Exact;
  std::printf("[figure] TPLA tp=2 g=2 identity U, random weights, T=12: rel_l2 exact-norm=%.3e "
              "approx-norm=%.3e\n", err, err_approx);
  EXPECT_GT(err, 1e-4);
  EXPECT_LT(err, 1.0);
  s.mu = {1.7, 1.7};
  EXPECT_NE(rel_l2(tpla_attention(cfg, w, h, s).out, ref), err);
}

TEST(TplaReference, PdSeparationPromptRowsAreExact) {
  const MlaConfig cfg = test_config_v3_style();
  const AttentionWeights w = random_attention_weights(cfg, 37);
  const MatrixR h = random_matrix(10, cfg.hidden_size, 38);
  TplaSlicing s;
  s.tp = 2;
  s.groups = 2;
  const MatrixR full = attention_naive(cfg, w, h);
  const MatrixR pd = tpla_prefill_then_decode(cfg, w, h, 7, s);
  EXPECT_LE(rel_l2(pd.topRows(7), full.topRows(7)), kExactTol);
  EXPECT_GT(rel_l2(pd.bottomRows(3), full.bottomRows(3)), 1e-6);  // decode rows are sliced
  // g = 1 makes the decode rows exact too
  s.groups = 1;
  EXPECT_LE(rel_l2(tpla_prefill_then_decode(cfg, w, h, 7, s), full), kExactTol);
}

TEST(TplaReference, BadSlicingNamesTheField) {
  const MlaConfig cfg = test_config_v3_style();
  TplaSlicing s;
  s.tp = 4;
  s.groups = 3;
  try {
    s.validate(cfg);
    FAIL() << "groups 3 with tp 4 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("groups"), std::string::npos) << e.what();
  }
  s.tp = 8;
  s.groups = 1;  // H = 4 heads cannot split 8 ways
  EXPECT_THROW(s.validate(cfg), InputError);
  s.tp = 2;
  s.groups = 2;
  s.f = {0.5};
  EXPECT_THROW(s.validate(cfg), InputError);
}

}  // namespace
}  // namespace mla::model
