#pragma once
// Test-side runner of per-rank converted weights: each rank runs its own slice exactly as a
// serving engine would (its own config, its own weights), and the o_proj partial outputs are
// summed (the all-reduce). Under --norm exact the ranks' sums of squares are all-reduced
// first. This deliberately uses only the rank checkpoints' weights, not the original ones,
// so comparing it with lib/model's tpla_attention / attention_naive tests the bookkeeping.
#include <vector>

#include "model/attention_reference.hpp"
#include "transform/tpla.hpp"

namespace mla::transform::testing {

inline MatrixR rank_sum_attention(const model::MlaConfig& rank_cfg, const std::vector<model::AttentionWeights>& ranks,
                                  const TplaLayout& layout, NormMode norm, const MatrixR& h) {
  const int64_t T = h.rows(), dcl = rank_cfg.kv_lora_rank, H = rank_cfg.num_heads, d_r = rank_cfg.qk_rope_head_dim;
  const int64_t d_c = dcl * layout.g;
  // Global sum of squares of c per token: one rank per group contributes its slice.
  std::vector<MatrixR> c(ranks.size());
  std::vector<model::LatentCache> cache(ranks.size());
  VectorD sumsq = VectorD::Zero(T);
  for (size_t r = 0; r < ranks.size(); ++r) {
    cache[r] = model::compute_latent(rank_cfg, ranks[r], h, 0, &c[r]);
    if (layout.index_in_group(static_cast<int>(r)) == 0) sumsq += c[r].rowwise().squaredNorm();
  }
  MatrixR out = MatrixR::Zero(T, h.cols());
  const double scale = rank_cfg.softmax_scale();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const model::AttentionWeights& w = ranks[r];
    if (norm == NormMode::Exact)
      for (int64_t t = 0; t < T; ++t) {
        const double inv = 1.0 / std::sqrt(sumsq(t) / d_c + rank_cfg.rms_norm_eps);
        cache[r].x.row(t) = (c[r].row(t) * inv).cwiseProduct(w.kv_a_layernorm.transpose());
      }
    const model::QueryParts q = model::project_queries(rank_cfg, w, h, 0);
    const MatrixR q_lat = model::absorb_queries(rank_cfg, w, q.q_nope);
    for (int64_t t = 0; t < T; ++t) {
      model::LatentCache prefix{cache[r].x.topRows(t + 1), cache[r].k_pe.topRows(t + 1)};
      MatrixR ql = Eigen::Map<const MatrixR>(q_lat.row(t).data(), H, dcl);
      MatrixR qp = Eigen::Map<const MatrixR>(q.q_pe.row(t).data(), H, d_r);
      const model::DecodeCoreResult core = model::absorbed_decode_core(ql, qp, prefix, scale);
      MatrixR o_lat = Eigen::Map<const MatrixR>(core.o_lat.data(), 1, H * dcl);
      const MatrixR o = model::expand_latent_output(rank_cfg, w, o_lat);
      out.row(t) += o * w.o_proj.transpose();
    }
  }
  return out;
}

// max |a - b| / max |b|
inline double max_rel(const MatrixR& a, const MatrixR& b) {
  return (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
}

}  // namespace mla::transform::testing
