#include "model/tpla_reference.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "model/rmsnorm.hpp"

namespace mla::model {

namespace {

// One rank's partial output for query rows against latent rows x_k / k_pe, where query row t
// attends key rows [0, key_limit[t]).
MatrixR rank_partial(const MlaConfig& cfg, const AttentionWeights& w, const TplaRankPlacement& p,
                     double mu, const QueryParts& q, const MatrixR& x_k, const MatrixR& k_pe,
                     const std::vector<int64_t>& key_limit) {
  const int64_t T = q.q_nope.rows(), width = p.latent_end - p.latent_begin;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  const double scale = cfg.softmax_scale();
  MatrixR partial = MatrixR::Zero(T, cfg.hidden_size);
  std::vector<double> s;
  for (int64_t hd = p.head_begin; hd < p.head_end; ++hd) {
    const MatrixR uk_k = w.w_uk(cfg, hd).middleCols(p.latent_begin, width);  // [d_n, width]
    const MatrixR uv_k = w.w_uv(cfg, hd).middleCols(p.latent_begin, width);  // [d_v, width]
    const MatrixR q_lat_k = q.q_nope.middleCols(hd * d_n, d_n) * uk_k * mu;  // [T, width]
    MatrixR o_lat_k = MatrixR::Zero(T, width);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t L = key_limit[t];
      s.assign(static_cast<size_t>(L), 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < L; ++j) {
        s[j] = scale * (q_lat_k.row(t).dot(x_k.row(j)) +
                        q.q_pe.row(t).segment(hd * d_r, d_r).dot(k_pe.row(j)));
        m = std::max(m, s[j]);
      }
      double denom = 0.0;
      for (int64_t j = 0; j < L; ++j) denom += (s[j] = std::exp(s[j] - m));
      for (int64_t j = 0; j < L; ++j) o_lat_k.row(t) += (s[j] / denom) * x_k.row(j);
    }
    const MatrixR o_h = o_lat_k * uv_k.transpose();  // [T, d_v]
    partial += o_h * w.o_proj.middleCols(hd * d_v, d_v).transpose();
  }
  return partial;
}

}  // namespace

void TplaSlicing::validate(const MlaConfig& cfg) const {
  auto bad = [](const std::string& what) { throw InputError("TPLA slicing: " + what); };
  if (tp < 1) bad("tp must be >= 1, got " + std::to_string(tp));
  if (groups < 1 || tp % groups != 0) {
    bad("groups (g) must divide tp = " + std::to_string(tp) + ", got " + std::to_string(groups));
  }
  if (cfg.kv_lora_rank % groups != 0) {
    bad("kv_lora_rank " + std::to_string(cfg.kv_lora_rank) + " is not divisible by groups " +
        std::to_string(groups));
  }
  if (cfg.num_heads % (tp / groups) != 0) {
    bad("num_attention_heads " + std::to_string(cfg.num_heads) +
        " is not divisible by tp/groups = " + std::to_string(tp / groups));
  }
  if (!f.empty() && static_cast<int64_t>(f.size()) != groups) {
    bad("f has " + std::to_string(f.size()) + " entries, expected groups = " +
        std::to_string(groups));
  }
  if (!mu.empty() && static_cast<int64_t>(mu.size()) != groups) {
    bad("mu has " + std::to_string(mu.size()) + " entries, expected groups = " +
        std::to_string(groups));
  }
  for (size_t k = 0; k < f.size(); ++k) {
    if (!(f[k] >= 0.0 && f[k] <= 1.0)) bad("f[" + std::to_string(k) + "] = " +
                                            std::to_string(f[k]) + " is outside [0, 1]");
  }
  for (size_t k = 0; k < mu.size(); ++k) {
    if (!std::isfinite(mu[k])) bad("mu[" + std::to_string(k) + "] is not finite");
  }
}

TplaRankPlacement tpla_rank_placement(const MlaConfig& cfg, const TplaSlicing& s, int64_t rank) {
  s.validate(cfg);
  if (rank < 0 || rank >= s.tp) {
    throw InputError("TPLA: rank " + std::to_string(rank) + " outside [0, " +
                     std::to_string(s.tp) + ")");
  }
  // validate() above has checked what TplaLayout::make would (with the reference's own
  // messages and without the converter's tp in {1, 2, 4, 8}).
  const TplaLayout layout{static_cast<int>(s.tp), static_cast<int>(s.groups), cfg.num_heads, cfg.kv_lora_rank};
  const int r = static_cast<int>(rank);
  const Range heads = layout.heads(r), latent = layout.latent(r);
  TplaRankPlacement p;
  p.rank = rank;
  p.group = layout.group_of(r);
  p.head_begin = heads.begin;
  p.head_end = heads.end;
  p.latent_begin = latent.begin;
  p.latent_end = latent.end;
  return p;
}

MatrixR tpla_slice_latent(const MlaConfig& cfg, const AttentionWeights& w, const TplaSlicing& s,
                          const MatrixR& c, int64_t group) {
  const int64_t width = cfg.kv_lora_rank / s.groups, begin = group * width;
  if (s.norm == NormMode::Exact) {
    return rmsnorm(c, w.kv_a_layernorm, cfg.rms_norm_eps).middleCols(begin, width);
  }
  const VectorD gamma_k =
      w.kv_a_layernorm.segment(begin, width) * std::sqrt(static_cast<double>(s.groups) *
                                                          s.f_of(group));
  return rmsnorm(c.middleCols(begin, width), gamma_k, cfg.rms_norm_eps);
}

TplaResult tpla_attention(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                          const TplaSlicing& s, int64_t pos0) {
  w.validate(cfg);
  s.validate(cfg);
  const int64_t T = h.rows();
  const QueryParts q = project_queries(cfg, w, h, pos0);
  MatrixR c;
  const LatentCache lat = compute_latent(cfg, w, h, pos0, &c);
  std::vector<int64_t> key_limit(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) key_limit[t] = t + 1;
  TplaResult r;
  r.out = MatrixR::Zero(T, cfg.hidden_size);
  for (int64_t rank = 0; rank < s.tp; ++rank) {
    const TplaRankPlacement p = tpla_rank_placement(cfg, s, rank);
    const MatrixR x_k = tpla_slice_latent(cfg, w, s, c, p.group);
    r.partial.push_back(rank_partial(cfg, w, p, s.mu_of(p.group), q, x_k, lat.k_pe, key_limit));
    r.out += r.partial.back();
  }
  return r;
}

MatrixR tpla_prefill_then_decode(const MlaConfig& cfg, const AttentionWeights& w,
                                 const MatrixR& h, int64_t P, const TplaSlicing& s) {
  w.validate(cfg);
  s.validate(cfg);
  if (P < 0 || P > h.rows()) {
    throw InputError("tpla_prefill_then_decode: prompt length " + std::to_string(P) +
                     " outside [0, " + std::to_string(h.rows()) + "]");
  }
  const int64_t rows = h.rows(), width = cfg.kv_lora_rank / s.groups;
  MatrixR out(rows, cfg.hidden_size);
  // Exact MLA prefill; its cache rows hold the exact (global-norm) x.
  const PrefillResult pre = prefill(cfg, w, h.topRows(P));
  out.topRows(P) = pre.out;
  // Per-group latent cache: prompt rows exact x sliced, decode rows sliced per the norm mode.
  std::vector<MatrixR> x_cache(static_cast<size_t>(s.groups));
  for (int64_t k = 0; k < s.groups; ++k) {
    x_cache[k].resize(rows, width);
    x_cache[k].topRows(P) = pre.cache.x.middleCols(k * width, width);
  }
  MatrixR k_pe(rows, cfg.qk_rope_head_dim);
  k_pe.topRows(P) = pre.cache.k_pe;
  for (int64_t t = P; t < rows; ++t) {
    const MatrixR h_t = h.middleRows(t, 1);
    MatrixR c;
    const LatentCache fresh = compute_latent(cfg, w, h_t, t, &c);
    k_pe.row(t) = fresh.k_pe.row(0);
    for (int64_t k = 0; k < s.groups; ++k) {
      x_cache[k].row(t) = tpla_slice_latent(cfg, w, s, c, k).row(0);
    }
    const QueryParts q = project_queries(cfg, w, h_t, t);
    const std::vector<int64_t> key_limit{t + 1};
    MatrixR sum = MatrixR::Zero(1, cfg.hidden_size);
    for (int64_t rank = 0; rank < s.tp; ++rank) {
      const TplaRankPlacement p = tpla_rank_placement(cfg, s, rank);
      sum += rank_partial(cfg, w, p, s.mu_of(p.group), q, x_cache[p.group], k_pe, key_limit);
    }
    out.row(t) = sum.row(0);
  }
  return out;
}

}  // namespace mla::model
