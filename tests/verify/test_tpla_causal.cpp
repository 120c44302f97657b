// verify-decode's batched float64 TPLA path (verify/tpla_causal.hpp) against the per-token
// form it replaces for the end-to-end comparison: one absorbed decode step per position on a
// cache of [x | k_pe] rows (model::absorbed_decode_core), summed over ranks.
#include <gtest/gtest.h>

#include <random>

#include "io/checkpoint.hpp"
#include "model/attention_reference.hpp"
#include "verify/tpla_causal.hpp"
#include "verify_fixture.hpp"

using namespace verify_test;
using mla::MatrixR;
using mla::VectorD;

namespace {

// Per-token reference of tpla_attention_f64 (the layout of verify-decode's float64 path).
MatrixR per_token(const mla::model::MlaConfig& cfg, const std::vector<mla::io::RankAttention>& ranks,
                  const std::vector<int>& group_of, bool exact, const MatrixR& h, int64_t P) {
  const int64_t n = h.rows(), T = n - P;
  const int tp = static_cast<int>(ranks.size());
  std::vector<MatrixR> c(tp);
  std::vector<mla::model::LatentCache> lat(tp);
  for (int r = 0; r < tp; ++r) lat[r] = mla::model::compute_latent(ranks[r].config, ranks[r].weights, h, 0, &c[r]);
  VectorD ss = VectorD::Zero(n);
  std::vector<bool> seen(8, false);
  for (int r = 0; r < tp; ++r)
    if (!seen[group_of[r]]) {
      seen[group_of[r]] = true;
      ss += c[r].rowwise().squaredNorm();
    }
  MatrixR out = MatrixR::Zero(T, cfg.hidden_size);
  for (int r = 0; r < tp; ++r) {
    const auto& cr = ranks[r].config;
    const auto& w = ranks[r].weights;
    MatrixR X(n, cr.kv_lora_rank);
    for (int64_t t = 0; t < n; ++t) {
      const double rms = std::sqrt(ss(t) / static_cast<double>(cfg.kv_lora_rank) + cfg.rms_norm_eps);
      if (t < P) X.row(t) = c[r].row(t) / rms;
      else if (exact) X.row(t) = (c[r].row(t) / rms).cwiseProduct(w.kv_a_layernorm.transpose());
      else X.row(t) = lat[r].x.row(t);
    }
    const mla::model::QueryParts q = mla::model::project_queries(cr, w, h, 0);
    const MatrixR q_lat = mla::model::absorb_queries(cr, w, q.q_nope);
    for (int64_t t = P; t < n; ++t) {
      mla::model::LatentCache cache;
      cache.x = X.topRows(t + 1);
      cache.k_pe = lat[r].k_pe.topRows(t + 1);
      const MatrixR ql = Eigen::Map<const MatrixR>(q_lat.row(t).data(), cr.num_heads, cr.kv_lora_rank);
      const MatrixR qp = Eigen::Map<const MatrixR>(q.q_pe.row(t).data(), cr.num_heads, cr.qk_rope_head_dim);
      const auto core = mla::model::absorbed_decode_core(ql, qp, cache, cr.softmax_scale());
      const MatrixR o_lat = Eigen::Map<const MatrixR>(core.o_lat.data(), 1, core.o_lat.size());
      out.row(t - P) += mla::model::expand_latent_output(cr, w, o_lat) * w.o_proj.transpose();
    }
  }
  return out;
}

void check(const fs::path& converted, int tp, bool exact) {
  const auto cfg = mla::io::Checkpoint::open(tiny_v2()).config();
  std::vector<mla::io::RankAttention> ranks;
  std::vector<int> group_of;
  for (int r = 0; r < tp; ++r) {
    ranks.push_back(mla::io::load_rank_attention(converted / mla::io::rank_dir_name(r, tp), 3));
    group_of.push_back(ranks.back().tpla.at("group").get<int>());
  }
  const int g = ranks[0].tpla.at("g").get<int>();
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  MatrixR h(20, cfg.hidden_size);
  for (int64_t i = 0; i < h.size(); ++i) h.data()[i] = nd(rng);
  const mla::verify::TplaLayerView view{&cfg, &ranks, &group_of, g, exact};
  for (int64_t P : {int64_t{0}, int64_t{7}}) {
    const MatrixR a = mla::verify::tpla_attention_f64(view, h, P);
    const MatrixR b = per_token(cfg, ranks, group_of, exact, h, P);
    ASSERT_EQ(a.rows(), 20 - P);
    EXPECT_LT((a - b).norm() / b.norm(), 1e-12) << "P = " << P;
  }
}

}  // namespace

TEST(TplaCausal, BatchedPathEqualsPerTokenDecodeApproxNorm) {
  check(convert("tp2g2_pca_like", 2, 2, mla::transform::Reparam::Hadamard, mla::transform::NormMode::Approx), 2, false);
}

TEST(TplaCausal, BatchedPathEqualsPerTokenDecodeExactNormTp4) {
  check(convert("tp4g2_exact", 4, 2, mla::transform::Reparam::Hadamard, mla::transform::NormMode::Exact), 4, true);
}
