#include "verify/tpla_causal.hpp"

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "model/attention_reference.hpp"

namespace mla::verify {

MatrixR tpla_attention_f64(const TplaLayerView& L, const MatrixR& h, int64_t P) {
  const model::MlaConfig& cfg = *L.cfg;
  const auto& ranks = *L.ranks;
  const int64_t n = h.rows(), T = n - P, D = cfg.hidden_size;
  if (P < 0 || T < 1) throw InputError("tpla_attention_f64: prefill " + std::to_string(P) + " of " + std::to_string(n) + " rows");
  const double eps = cfg.rms_norm_eps;
  const int tp = static_cast<int>(ranks.size());
  // Each rank's latent slice c_k, its local normalisation, k_pe and absorbed queries.
  std::vector<model::LatentCache> lat(tp);
  std::vector<MatrixR> c(tp), q_lat(tp), q_pe(tp);
  for (int r = 0; r < tp; ++r) {
    lat[r] = model::compute_latent(ranks[r].config, ranks[r].weights, h, 0, &c[r]);
    model::QueryParts q = model::project_queries(ranks[r].config, ranks[r].weights, h.bottomRows(T), P);
    q_lat[r] = model::absorb_queries(ranks[r].config, ranks[r].weights, q.q_nope);
    q_pe[r] = std::move(q.q_pe);
  }
  // Exact global rms per token: one rank of each group (the all-reduced sum of squares).
  VectorD ss = VectorD::Zero(n);
  std::vector<bool> seen(static_cast<std::size_t>(L.g), false);
  for (int r = 0; r < tp; ++r) {
    const int k = (*L.group_of)[r];
    if (seen[k]) continue;
    seen[k] = true;
    ss += c[r].rowwise().squaredNorm();
  }
  const VectorD rms = (ss / static_cast<double>(cfg.kv_lora_rank)).array().unaryExpr([&](double v) {
    return std::sqrt(v + eps);
  });
  const double neg_inf = -std::numeric_limits<double>::infinity();
  MatrixR out = MatrixR::Zero(T, D);
  for (int r = 0; r < tp; ++r) {
    const auto& cfg_r = ranks[r].config;
    const auto& w_r = ranks[r].weights;
    const int64_t H = cfg_r.num_heads, dc = cfg_r.kv_lora_rank, dr = cfg_r.qk_rope_head_dim;
    const double scale = cfg_r.softmax_scale();
    MatrixR X(n, dc);
    for (int64_t t = 0; t < n; ++t) {
      if (t < P) X.row(t) = c[r].row(t) / rms(t);
      else if (L.exact_norm) X.row(t) = (c[r].row(t) / rms(t)).cwiseProduct(w_r.kv_a_layernorm.transpose());
      else X.row(t) = lat[r].x.row(t);
    }
    MatrixR o_lat(T, H * dc);
    for (int64_t hh = 0; hh < H; ++hh) {
      MatrixR S = scale * (q_lat[r].middleCols(hh * dc, dc) * X.transpose() +
                           q_pe[r].middleCols(hh * dr, dr) * lat[r].k_pe.transpose());
      for (int64_t i = 0; i < T; ++i) {
        auto row = S.row(i);
        const int64_t keys = P + i + 1;
        if (keys < n) row.tail(n - keys).setConstant(neg_inf);
        const double m = row.head(keys).maxCoeff();
        row = (row.array() - m).exp();
        row /= row.sum();
      }
      o_lat.middleCols(hh * dc, dc) = S * X;
    }
    out += model::expand_latent_output(cfg_r, w_r, o_lat) * w_r.o_proj.transpose();
  }
  return out;
}

}  // namespace mla::verify
