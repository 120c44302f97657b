// Exactness of the reparameterisation and the TPLA slicing bookkeeping, in float64
// (SPEC section 2). Errors that are measured rather than bounded are printed.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "core/error.hpp"
#include "model/attention_reference.hpp"
#include "model/test_fixtures.hpp"
#include "model/tpla_reference.hpp"
#include "rank_sum.hpp"
#include "transform/encode.hpp"
#include "transform/reparam.hpp"
#include "transform/shard_table.hpp"
#include "transform/tpla.hpp"

namespace mla::transform {
namespace {

using testing::max_rel;
using testing::rank_sum_attention;

// Reparameterisation and slicing of the original float64 weights are exact up to float64
// rounding of a few matrix products of O(1) entries: 1e-12 relative is ~4 orders above that.
constexpr double kExactTol = 1e-12;
// A BF16 cast of every weight: each entry relative error <= 2^-9; the layer output is a
// product of several such weights: report it, bound it loosely to catch gross mistakes.
constexpr double kBf16OutputTol = 5e-2;

// A random orthogonal matrix (QR of a seeded random matrix): stands in for a PCA basis.
MatrixR random_orthogonal(int64_t n, uint64_t seed) {
  const MatrixR a = model::random_matrix(n, n, seed);
  Eigen::HouseholderQR<MatrixR> qr(a);
  return qr.householderQ() * MatrixR::Identity(n, n);
}

model::AttentionWeights reparameterise(const model::MlaConfig& cfg, model::AttentionWeights w, const MatrixR& U) {
  absorb_gamma(cfg, w);
  rotate_latent(cfg, w, U);
  return w;
}

std::vector<model::AttentionWeights> slice_all(const model::MlaConfig& cfg, const model::AttentionWeights& w,
                                               const TplaLayout& L, NormMode norm) {
  std::vector<model::AttentionWeights> out;
  const SliceCorrections corr = SliceCorrections::defaults(cfg.num_heads, L.g);
  for (int r = 0; r < L.tp; ++r) out.push_back(slice_attention(cfg, w, L, r, corr, norm));
  return out;
}

void cast_bf16(MatrixR& m) {
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = bf16_to_float(fast_double_to_bf16(m.data()[i]));
}
void cast_bf16(VectorD& v) {
  for (int64_t i = 0; i < v.size(); ++i) v.data()[i] = bf16_to_float(fast_double_to_bf16(v.data()[i]));
}

class Tp1EachRotation : public ::testing::TestWithParam<std::tuple<bool, Reparam>> {};

TEST_P(Tp1EachRotation, ConvertedLayerEqualsOriginal) {
  const auto [v3, kind] = GetParam();
  const model::MlaConfig cfg = v3 ? model::test_config_v3_style() : model::test_config_v2_style();
  const model::AttentionWeights w = model::random_attention_weights(cfg, 11);
  const MatrixR pca = random_orthogonal(cfg.kv_lora_rank, 5);
  const MatrixR U = make_rotation(kind, cfg.kv_lora_rank, 1234, &pca, "test");
  const TplaLayout L = TplaLayout::make(cfg, 1, 1);
  const model::AttentionWeights rank = slice_all(cfg, reparameterise(cfg, w, U), L, NormMode::Approx)[0];
  const MatrixR h = model::random_matrix(9, cfg.hidden_size, 77);
  const MatrixR ref = model::attention_naive(cfg, w, h);
  const MatrixR got = model::attention_naive(rank_attention_config(cfg, L), rank, h);
  const double err = max_rel(got, ref);
  EXPECT_LE(err, kExactTol) << reparam_name(kind);

  model::AttentionWeights cast = rank;  // what a BF16 checkpoint holds
  for (MatrixR* m : {&cast.q_proj, &cast.q_a_proj, &cast.q_b_proj, &cast.kv_a_proj_with_mqa, &cast.kv_b_proj, &cast.o_proj})
    cast_bf16(*m);
  cast_bf16(cast.q_a_layernorm);
  cast_bf16(cast.kv_a_layernorm);
  const double err_bf16 = max_rel(model::attention_naive(cfg, cast, h), ref);
  std::printf("[tp=1 %s %s] max rel diff float64 %.3e, after BF16 cast of the weights %.3e\n",
              v3 ? "v3" : "v2", std::string(reparam_name(kind)).c_str(), err, err_bf16);
  EXPECT_LE(err_bf16, kBf16OutputTol);
}

INSTANTIATE_TEST_SUITE_P(All, Tp1EachRotation,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(Reparam::Identity, Reparam::Hadamard, Reparam::Pca)));

TEST(Tpla, SumOverRanksMatchesReferenceAndReportsSlicingError) {
  const model::MlaConfig cfg = model::test_config_v3_style();
  const MatrixR h = model::random_matrix(12, cfg.hidden_size, 3);
  for (int layer = 0; layer < 2; ++layer) {
    const model::AttentionWeights w = model::random_attention_weights(cfg, 100 + layer);
    const MatrixR ref = model::attention_naive(cfg, w, h);
    for (int tp : {2, 4})
      for (Reparam kind : {Reparam::Identity, Reparam::Hadamard}) {
        const TplaLayout L = TplaLayout::make(cfg, tp, tp);
        const model::AttentionWeights rw = reparameterise(cfg, w, make_rotation(kind, cfg.kv_lora_rank, 7, nullptr, "t"));
        for (NormMode norm : {NormMode::Exact, NormMode::Approx}) {
          const MatrixR sum = rank_sum_attention(rank_attention_config(cfg, L), slice_all(cfg, rw, L, norm), L, norm, h);
          // Independent oracle: lib/model's TPLA reference on the unsliced rotated weights.
          model::TplaSlicing s;
          s.tp = tp;
          s.groups = tp;
          s.norm = norm;  // one NormMode for reference and converter
          const MatrixR oracle = model::tpla_attention(cfg, rw, h, s).out;
          EXPECT_LE(max_rel(sum, oracle), kExactTol) << "tp=" << tp << " " << reparam_name(kind);
          std::printf("[layer %d tp=g=%d %-8s norm %-6s mu=1] sliced-attention error vs original: max rel %.3e\n",
                      layer, tp, std::string(reparam_name(kind)).c_str(), std::string(norm_mode_name(norm)).c_str(),
                      max_rel(sum, ref));
        }
      }
  }
}

TEST(Tpla, AllEnergyInOneSliceMakesSlicingExact) {
  // Latent confined to an m = d_c/g dimensional subspace span(B); U's first m columns are B, so
  // the rotated latent lives in slice 0 and slices 1.. carry exactly nothing.
  for (int tp : {2, 4}) {
    const model::MlaConfig cfg = model::test_config_v3_style();
    model::AttentionWeights w = model::random_attention_weights(cfg, 21);
    const int64_t d_c = cfg.kv_lora_rank, m = d_c / tp;
    const MatrixR U = random_orthogonal(d_c, 99);
    const MatrixR B = U.leftCols(m);
    const MatrixR A = model::random_matrix(m, cfg.hidden_size, 8, std::sqrt(3.0 / cfg.hidden_size));
    w.kv_a_proj_with_mqa.topRows(d_c) = B * A;
    // gamma only rescales kv_b after absorption; c itself (what is sliced) is in span(B) anyway.
    const MatrixR h = model::random_matrix(10, cfg.hidden_size, 4);
    const MatrixR ref = model::attention_naive(cfg, w, h);
    const TplaLayout L = TplaLayout::make(cfg, tp, tp);
    const model::AttentionWeights rw = reparameterise(cfg, w, make_rotation(Reparam::Pca, d_c, std::nullopt, &U, "t"));
    const MatrixR exact = rank_sum_attention(rank_attention_config(cfg, L), slice_all(cfg, rw, L, NormMode::Exact), L,
                                             NormMode::Exact, h);
    const double err = max_rel(exact, ref);
    std::printf("[tp=g=%d energy in slice 0, norm exact] max rel %.3e\n", tp, err);
    EXPECT_LE(err, kExactTol);
    // Control: the identity basis spreads that latent over every slice, and the error is real.
    const model::AttentionWeights iw = reparameterise(cfg, w, MatrixR::Identity(d_c, d_c));
    const MatrixR spread = rank_sum_attention(rank_attention_config(cfg, L), slice_all(cfg, iw, L, NormMode::Exact), L,
                                              NormMode::Exact, h);
    EXPECT_GT(max_rel(spread, ref), 1e-6);
  }
}

TEST(Tpla, MuScalesOnlyTheContentLogit) {
  // mu folded into W_UK equals the reference's mu in the logit.
  const model::MlaConfig cfg = model::test_config_v3_style();
  const model::AttentionWeights w = model::random_attention_weights(cfg, 5);
  const TplaLayout L = TplaLayout::make(cfg, 2, 2);
  SliceCorrections corr = SliceCorrections::defaults(cfg.num_heads, 2);
  corr.mu.col(0).setConstant(1.3);
  corr.mu.col(1).setConstant(0.7);
  corr.f = {0.6, 0.4};
  const model::AttentionWeights rw = reparameterise(cfg, w, MatrixR::Identity(cfg.kv_lora_rank, cfg.kv_lora_rank));
  std::vector<model::AttentionWeights> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(slice_attention(cfg, rw, L, r, corr, NormMode::Approx));
  EXPECT_DOUBLE_EQ(ranks[0].kv_a_layernorm(0), std::sqrt(2 * 0.6));
  EXPECT_DOUBLE_EQ(ranks[1].kv_a_layernorm(0), std::sqrt(2 * 0.4));
  const MatrixR h = model::random_matrix(7, cfg.hidden_size, 9);
  const MatrixR sum = rank_sum_attention(rank_attention_config(cfg, L), ranks, L, NormMode::Approx, h);
  model::TplaSlicing s;
  s.tp = 2;
  s.groups = 2;
  s.f = {0.6, 0.4};
  s.mu = {1.3, 0.7};
  EXPECT_LE(max_rel(sum, model::tpla_attention(cfg, rw, h, s).out), kExactTol);
}

TEST(Reparam, Errors) {
  model::MlaConfig cfg = model::test_config_v3_style();
  EXPECT_THROW(make_rotation(Reparam::Hadamard, 48, std::nullopt, nullptr, "layer 0"), InputError);
  EXPECT_THROW(make_rotation(Reparam::Pca, 32, std::nullopt, nullptr, "layer 0"), InputError);
  const MatrixR not_orth = MatrixR::Constant(32, 32, 0.5);
  EXPECT_THROW(make_rotation(Reparam::Pca, 32, std::nullopt, &not_orth, "layer 0"), InputError);
  EXPECT_THROW(TplaLayout::make(cfg, 3, 1), InputError);
  EXPECT_THROW(TplaLayout::make(cfg, 8, 1), InputError);   // 4 heads not divisible by 8
  EXPECT_THROW(TplaLayout::make(cfg, 4, 3), InputError);   // g does not divide tp
  cfg.kv_lora_rank = 36;
  EXPECT_THROW(TplaLayout::make(cfg, 8, 8), InputError);   // d_c not divisible by g
  model::MlaConfig c3 = model::test_config_v3_style();
  model::AttentionWeights w = model::random_attention_weights(c3, 1);
  EXPECT_THROW(rotate_latent(c3, w, MatrixR::Identity(32, 32)), InputError);  // gamma not absorbed
}

TEST(ShardTable, EveryV3TensorHasARuleAndSplitsAreChecked) {
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                        "model.layers.3.input_layernorm.weight", "model.layers.3.self_attn.q_b_proj.weight",
                        "model.layers.3.self_attn.kv_b_proj.weight_scale_inv",
                        "model.layers.3.mlp.experts.17.down_proj.weight", "model.layers.3.mlp.gate.e_score_correction_bias",
                        "model.layers.61.eh_proj.weight", "model.layers.61.shared_head.head.weight"})
    EXPECT_NO_THROW(find_rule(n)) << n;
  EXPECT_EQ(find_rule("model.layers.0.mlp.down_proj.weight").kind, SplitKind::Row);
  EXPECT_EQ(find_rule("model.layers.0.mlp.experts.3.up_proj.weight").kind, SplitKind::Column);
  EXPECT_EQ(find_rule("model.layers.0.self_attn.o_proj.weight").kind, SplitKind::TplaHeads);
  EXPECT_THROW(find_rule("model.layers.0.mystery.weight"), InputError);
  const model::MlaConfig cfg = model::test_config_v3_style();
  const TplaLayout L = TplaLayout::make(cfg, 4, 1);
  const ShardRule& col = find_rule("model.layers.0.mlp.gate_proj.weight");
  EXPECT_THROW(simple_slice("model.layers.0.mlp.gate_proj.weight", {30, 96}, col, L, 0, 1), InputError);
  const Slice2D s = simple_slice("model.layers.0.mlp.gate_proj.weight", {32, 96}, col, L, 2, 1);
  EXPECT_EQ(s.rows.begin, 16);
  EXPECT_EQ(s.rows.end, 24);
  const ShardRule& o = find_rule("model.layers.0.self_attn.o_proj.weight");
  const Slice2D so = simple_slice("model.layers.0.self_attn.o_proj.weight", {96, 48}, o, L, 3, cfg.v_head_dim);
  EXPECT_EQ(so.cols.begin, 36);
  EXPECT_EQ(so.cols.end, 48);
}

}  // namespace
}  // namespace mla::transform
