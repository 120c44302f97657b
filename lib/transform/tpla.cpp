#include "transform/tpla.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"

namespace mla::transform {

Range head_block(const TplaLayout& layout, int rank, int64_t per_head) {
  const Range h = layout.heads(rank);
  return {h.begin * per_head, h.end * per_head};
}

SliceCorrections SliceCorrections::defaults(int64_t num_heads, int g) {
  return {std::vector<double>(g, 1.0 / g), MatrixR::Ones(num_heads, g)};
}

model::MlaConfig rank_attention_config(const model::MlaConfig& cfg, const TplaLayout& layout) {
  model::MlaConfig c = cfg;
  c.num_heads = layout.heads_per_rank();
  c.kv_lora_rank = layout.latent_per_group();
  return c;
}

double layernorm_scale(const TplaLayout& layout, int rank, const SliceCorrections& corr, NormMode norm) {
  if (norm == NormMode::Exact || layout.g == 1) return 1.0;
  const double f = corr.f.at(layout.group_of(rank));
  return std::sqrt(layout.g * f);
}

MatrixR slice_kv_a(const model::MlaConfig& cfg, const MatrixR& kv_a, const TplaLayout& layout, int rank) {
  const int64_t d_c = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim;
  if (kv_a.rows() != d_c + d_r)
    throw InputError("kv_a_proj_with_mqa has " + std::to_string(kv_a.rows()) + " rows, expected d_c + d_r = " +
                     std::to_string(d_c + d_r));
  const Range lat = layout.latent(rank);
  MatrixR out(lat.size() + d_r, kv_a.cols());
  out.topRows(lat.size()) = kv_a.middleRows(lat.begin, lat.size());
  out.bottomRows(d_r) = kv_a.middleRows(d_c, d_r);  // RoPE rows: replicated on every rank
  return out;
}

MatrixR slice_kv_b(const model::MlaConfig& cfg, const MatrixR& kv_b, const TplaLayout& layout, int rank,
                   const SliceCorrections& corr) {
  const int64_t d_n = cfg.qk_nope_head_dim, d_v = cfg.v_head_dim, per_head = d_n + d_v;
  if (kv_b.rows() != cfg.num_heads * per_head || kv_b.cols() != cfg.kv_lora_rank)
    throw InputError("kv_b_proj has shape [" + std::to_string(kv_b.rows()) + ", " + std::to_string(kv_b.cols()) +
                     "], expected [H (d_n + d_v), d_c] = [" + std::to_string(cfg.num_heads * per_head) + ", " +
                     std::to_string(cfg.kv_lora_rank) + "]");
  if (static_cast<int>(corr.f.size()) != layout.g || corr.mu.rows() != cfg.num_heads || corr.mu.cols() != layout.g)
    throw InputError("slice corrections must have f [g] and mu [H, g]");
  const Range heads = layout.heads(rank), lat = layout.latent(rank);
  const int k = layout.group_of(rank);
  MatrixR out(heads.size() * per_head, lat.size());
  for (int64_t h = heads.begin; h < heads.end; ++h) {
    const int64_t src = h * per_head, dst = (h - heads.begin) * per_head;
    out.middleRows(dst, per_head) = kv_b.block(src, lat.begin, per_head, lat.size());
    // mu_k on W_UK only: see the header for why this scales the content logit and nothing else.
    out.middleRows(dst, d_n) *= corr.mu(h, k);
  }
  return out;
}

model::AttentionWeights slice_attention(const model::MlaConfig& cfg, const model::AttentionWeights& w,
                                        const TplaLayout& layout, int rank, const SliceCorrections& corr,
                                        NormMode norm) {
  const int64_t qk = cfg.qk_head_dim();
  model::AttentionWeights out;
  const Range qrows = head_block(layout, rank, qk);
  if (cfg.has_q_lora()) {
    out.q_a_proj = w.q_a_proj;
    out.q_a_layernorm = w.q_a_layernorm;
    out.q_b_proj = w.q_b_proj.middleRows(qrows.begin, qrows.size());
  } else {
    out.q_proj = w.q_proj.middleRows(qrows.begin, qrows.size());
  }
  out.kv_a_proj_with_mqa = slice_kv_a(cfg, w.kv_a_proj_with_mqa, layout, rank);
  out.kv_a_layernorm = VectorD::Constant(layout.latent_per_group(), layernorm_scale(layout, rank, corr, norm));
  out.kv_b_proj = slice_kv_b(cfg, w.kv_b_proj, layout, rank, corr);
  const Range cols = head_block(layout, rank, cfg.v_head_dim);
  out.o_proj = w.o_proj.middleCols(cols.begin, cols.size());
  return out;
}

}  // namespace mla::transform
