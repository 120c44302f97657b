#include "model/attention_reference.hpp"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/rmsnorm.hpp"
#include "model/rope.hpp"

namespace mla::model {

namespace {

std::string dims(Eigen::Index r, Eigen::Index c) {
  return "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
}

void expect_shape(const MatrixR& m, int64_t rows, int64_t cols, const char* name) {
  if (m.rows() != rows || m.cols() != cols) {
    throw InputError(std::string("attention weights: ") + name + " has shape " +
                     dims(m.rows(), m.cols()) + ", expected " + dims(rows, cols));
  }
}

void expect_size(const VectorD& v, int64_t n, const char* name) {
  if (v.size() != n) {
    throw InputError(std::string("attention weights: ") + name + " has " +
                     std::to_string(v.size()) + " entries, expected " + std::to_string(n));
  }
}

void check_input(const MlaConfig& cfg, const MatrixR& h, int64_t pos0, const char* what) {
  if (h.cols() != cfg.hidden_size) {
    throw InputError(std::string(what) + ": input h has width " + std::to_string(h.cols()) +
                     ", expected hidden_size " + std::to_string(cfg.hidden_size));
  }
  if (pos0 < 0) {
    throw InputError(std::string(what) + ": negative start position " + std::to_string(pos0));
  }
}

// Softmax-weighted sum over keys j < n_keys for one head, in latent space:
// s_j = scale * (q_lat . x_j + q_pe . k_pe_j). Writes o_lat (x's width) and returns the LSE.
// Max subtraction keeps exp() in range; the LSE adds the max back (natural log).
double attend_latent(const double* q_lat, const double* q_pe, const MatrixR& x,
                     const MatrixR& k_pe, int64_t n_keys, double scale, double* o_lat) {
  const int64_t d_c = x.cols();
  const int64_t d_r = k_pe.cols();
  std::vector<double> s(static_cast<size_t>(n_keys));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n_keys; ++j) {
    double content = 0.0, rope = 0.0;
    for (int64_t i = 0; i < d_c; ++i) content += q_lat[i] * x(j, i);
    for (int64_t i = 0; i < d_r; ++i) rope += q_pe[i] * k_pe(j, i);
    s[j] = scale * (content + rope);
    m = std::max(m, s[j]);
  }
  double denom = 0.0;
  for (int64_t j = 0; j < n_keys; ++j) {
    s[j] = std::exp(s[j] - m);
    denom += s[j];
  }
  for (int64_t i = 0; i < d_c; ++i) o_lat[i] = 0.0;
  for (int64_t j = 0; j < n_keys; ++j) {
    const double p = s[j] / denom;
    for (int64_t i = 0; i < d_c; ++i) o_lat[i] += p * x(j, i);
  }
  return m + std::log(denom);
}

// Absorbed attention of query rows (positions given by `key_limit`: row t attends keys
// [0, key_limit[t])) against a latent cache. Fills q_lat/o_lat/lse [T, *] and returns o.
MatrixR absorbed_core_rows(const MlaConfig& cfg, const AttentionWeights& w, const QueryParts& q,
                           const LatentCache& cache, const std::vector<int64_t>& key_limit,
                           MatrixR& q_lat, MatrixR& o_lat, MatrixR& lse) {
  const int64_t T = q.q_nope.rows(), H = cfg.num_heads;
  const int64_t d_c = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim;
  const double scale = cfg.softmax_scale();
  q_lat = absorb_queries(cfg, w, q.q_nope);
  o_lat.resize(T, H * d_c);
  lse.resize(T, H);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hd = 0; hd < H; ++hd) {
      lse(t, hd) = attend_latent(&q_lat(t, hd * d_c), &q.q_pe(t, hd * d_r), cache.x, cache.k_pe,
                                 key_limit[t], scale, &o_lat(t, hd * d_c));
    }
  }
  return expand_latent_output(cfg, w, o_lat);
}

// The absorbed paths' trace: the queries, the new tokens' latent (c before and x after the
// RMSNorm, k_pe) and absorbed_core_rows' outputs (moved in).
AttentionTrace absorbed_trace(const QueryParts& q, MatrixR&& c, const LatentCache& fresh, MatrixR&& q_lat,
                              MatrixR&& o_lat, MatrixR&& lse, MatrixR&& o) {
  AttentionTrace tr;
  tr.q_nope = q.q_nope;
  tr.q_pe = q.q_pe;
  tr.c = std::move(c);
  tr.x = fresh.x;
  tr.k_pe = fresh.k_pe;
  tr.q_lat = std::move(q_lat);
  tr.o_lat = std::move(o_lat);
  tr.lse = std::move(lse);
  tr.o = std::move(o);
  return tr;
}

}  // namespace

void AttentionWeights::validate(const MlaConfig& cfg) const {
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d_c = cfg.kv_lora_rank;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  if (D <= 0 || H <= 0 || d_c <= 0 || d_n <= 0 || d_r <= 0 || d_v <= 0) {
    throw InputError("attention weights: config has a non-positive dimension (D=" +
                     std::to_string(D) + " H=" + std::to_string(H) + " d_c=" +
                     std::to_string(d_c) + " d_n=" + std::to_string(d_n) + " d_r=" +
                     std::to_string(d_r) + " d_v=" + std::to_string(d_v) + ")");
  }
  const int64_t q_rows = H * (d_n + d_r);
  if (cfg.has_q_lora()) {
    if (q_proj.size() != 0) {
      throw InputError("attention weights: q_proj is set (shape " +
                       dims(q_proj.rows(), q_proj.cols()) + ") but q_lora_rank is " +
                       std::to_string(cfg.q_lora_rank) + "; expected q_a_proj/q_b_proj only");
    }
    expect_shape(q_a_proj, cfg.q_lora_rank, D, "q_a_proj");
    expect_size(q_a_layernorm, cfg.q_lora_rank, "q_a_layernorm");
    expect_shape(q_b_proj, q_rows, cfg.q_lora_rank, "q_b_proj");
  } else {
    if (q_a_proj.size() != 0 || q_b_proj.size() != 0) {
      throw InputError("attention weights: q_a_proj/q_b_proj are set but q_lora_rank is null");
    }
    expect_shape(q_proj, q_rows, D, "q_proj");
  }
  expect_shape(kv_a_proj_with_mqa, d_c + d_r, D, "kv_a_proj_with_mqa");
  expect_size(kv_a_layernorm, d_c, "kv_a_layernorm");
  expect_shape(kv_b_proj, H * (d_n + d_v), d_c, "kv_b_proj");
  expect_shape(o_proj, D, H * d_v, "o_proj");
}

MatrixR AttentionWeights::w_uk(const MlaConfig& cfg, int64_t head) const {
  const int64_t stride = cfg.qk_nope_head_dim + cfg.v_head_dim;
  return kv_b_proj.middleRows(head * stride, cfg.qk_nope_head_dim);
}

MatrixR AttentionWeights::w_uv(const MlaConfig& cfg, int64_t head) const {
  const int64_t stride = cfg.qk_nope_head_dim + cfg.v_head_dim;
  return kv_b_proj.middleRows(head * stride + cfg.qk_nope_head_dim, cfg.v_head_dim);
}

QueryParts project_queries(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                           int64_t pos0) {
  check_input(cfg, h, pos0, "project_queries");
  const int64_t T = h.rows(), H = cfg.num_heads;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim;
  MatrixR q;
  if (cfg.has_q_lora()) {
    const MatrixR qa = rmsnorm(h * w.q_a_proj.transpose(), w.q_a_layernorm, cfg.rms_norm_eps);
    q = qa * w.q_b_proj.transpose();
  } else {
    q = h * w.q_proj.transpose();
  }
  const Rope rope(cfg);
  QueryParts out{MatrixR(T, H * d_n), MatrixR(T, H * d_r)};
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hd = 0; hd < H; ++hd) {
      const int64_t base = hd * (d_n + d_r);
      out.q_nope.row(t).segment(hd * d_n, d_n) = q.row(t).segment(base, d_n);
      out.q_pe.row(t).segment(hd * d_r, d_r) = q.row(t).segment(base + d_n, d_r);
      rope.apply(&out.q_pe(t, hd * d_r), pos0 + t);
    }
  }
  return out;
}

MatrixR absorb_queries(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& q_nope) {
  const int64_t T = q_nope.rows(), H = cfg.num_heads;
  const int64_t d_n = cfg.qk_nope_head_dim, d_c = cfg.kv_lora_rank;
  MatrixR q_lat(T, H * d_c);
  for (int64_t hd = 0; hd < H; ++hd) {
    // q_lat[h] = W_UK[h]^T q_nope[h]; as rows: q_nope_h [T, d_n] * W_UK[h] [d_n, d_c].
    q_lat.middleCols(hd * d_c, d_c) = q_nope.middleCols(hd * d_n, d_n) * w.w_uk(cfg, hd);
  }
  return q_lat;
}

MatrixR expand_latent_output(const MlaConfig& cfg, const AttentionWeights& w,
                             const MatrixR& o_lat) {
  const int64_t T = o_lat.rows(), H = cfg.num_heads;
  const int64_t d_v = cfg.v_head_dim, d_c = cfg.kv_lora_rank;
  MatrixR o(T, H * d_v);
  for (int64_t hd = 0; hd < H; ++hd) {
    o.middleCols(hd * d_v, d_v) = o_lat.middleCols(hd * d_c, d_c) * w.w_uv(cfg, hd).transpose();
  }
  return o;
}

void LatentCache::append(const MatrixR& x_new, const MatrixR& k_pe_new) {
  if (x_new.rows() != k_pe_new.rows() || (length() > 0 && (x_new.cols() != x.cols() ||
                                                           k_pe_new.cols() != k_pe.cols()))) {
    throw InputError("LatentCache::append: rows " + dims(x_new.rows(), x_new.cols()) + " and " +
                     dims(k_pe_new.rows(), k_pe_new.cols()) + " do not fit a cache of " +
                     dims(x.rows(), x.cols()) + " / " + dims(k_pe.rows(), k_pe.cols()));
  }
  MatrixR x2(x.rows() + x_new.rows(), x_new.cols());
  MatrixR k2(k_pe.rows() + k_pe_new.rows(), k_pe_new.cols());
  x2.topRows(x.rows()) = x;
  x2.bottomRows(x_new.rows()) = x_new;
  k2.topRows(k_pe.rows()) = k_pe;
  k2.bottomRows(k_pe_new.rows()) = k_pe_new;
  x = std::move(x2);
  k_pe = std::move(k2);
}

LatentCache compute_latent(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                           int64_t pos0, MatrixR* c_out) {
  check_input(cfg, h, pos0, "compute_latent");
  const int64_t d_c = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim;
  const MatrixR ckv = h * w.kv_a_proj_with_mqa.transpose();  // [T, d_c + d_r]
  const MatrixR c = ckv.leftCols(d_c);
  LatentCache cache;
  cache.x = rmsnorm(c, w.kv_a_layernorm, cfg.rms_norm_eps);
  cache.k_pe = ckv.rightCols(d_r);
  const Rope rope(cfg);
  for (int64_t t = 0; t < h.rows(); ++t) rope.apply(&cache.k_pe(t, 0), pos0 + t);
  if (c_out) *c_out = c;
  return cache;
}

MatrixR attention_naive(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                        int64_t pos0, AttentionTrace* trace) {
  w.validate(cfg);
  const int64_t T = h.rows(), H = cfg.num_heads;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  const double scale = cfg.softmax_scale();
  const QueryParts q = project_queries(cfg, w, h, pos0);
  MatrixR c;
  const LatentCache lat = compute_latent(cfg, w, h, pos0, &c);
  const MatrixR kv = lat.x * w.kv_b_proj.transpose();  // [T, H*(d_n+d_v)]
  MatrixR k_nope(T, H * d_n), v(T, H * d_v);
  for (int64_t hd = 0; hd < H; ++hd) {
    k_nope.middleCols(hd * d_n, d_n) = kv.middleCols(hd * (d_n + d_v), d_n);
    v.middleCols(hd * d_v, d_v) = kv.middleCols(hd * (d_n + d_v) + d_n, d_v);
  }
  MatrixR o = MatrixR::Zero(T, H * d_v);
  MatrixR lse(T, H);
  std::vector<double> s(static_cast<size_t>(T));
  for (int64_t hd = 0; hd < H; ++hd) {
    for (int64_t t = 0; t < T; ++t) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= t; ++j) {  // causal: keys at positions <= the query's
        const double nope = q.q_nope.row(t).segment(hd * d_n, d_n).dot(
            k_nope.row(j).segment(hd * d_n, d_n));
        const double rope = q.q_pe.row(t).segment(hd * d_r, d_r).dot(lat.k_pe.row(j));
        s[j] = scale * (nope + rope);
        m = std::max(m, s[j]);
      }
      double denom = 0.0;
      for (int64_t j = 0; j <= t; ++j) {
        s[j] = std::exp(s[j] - m);
        denom += s[j];
      }
      for (int64_t j = 0; j <= t; ++j) {
        o.row(t).segment(hd * d_v, d_v) += (s[j] / denom) * v.row(j).segment(hd * d_v, d_v);
      }
      lse(t, hd) = m + std::log(denom);
    }
  }
  MatrixR out = o * w.o_proj.transpose();
  if (trace) {
    *trace = AttentionTrace{};
    trace->q_nope = q.q_nope;
    trace->q_pe = q.q_pe;
    trace->c = c;
    trace->x = lat.x;
    trace->k_pe = lat.k_pe;
    trace->k_nope = std::move(k_nope);
    trace->v = std::move(v);
    trace->lse = std::move(lse);
    trace->o = std::move(o);
  }
  return out;
}

MatrixR attention_absorbed(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                           int64_t pos0, AttentionTrace* trace) {
  w.validate(cfg);
  const int64_t T = h.rows();
  const QueryParts q = project_queries(cfg, w, h, pos0);
  MatrixR c;
  const LatentCache lat = compute_latent(cfg, w, h, pos0, &c);
  std::vector<int64_t> key_limit(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) key_limit[t] = t + 1;  // causal
  MatrixR q_lat, o_lat, lse;
  MatrixR o = absorbed_core_rows(cfg, w, q, lat, key_limit, q_lat, o_lat, lse);
  MatrixR out = o * w.o_proj.transpose();
  if (trace)
    *trace = absorbed_trace(q, std::move(c), lat, std::move(q_lat), std::move(o_lat), std::move(lse), std::move(o));
  return out;
}

DecodeCoreResult absorbed_decode_core(const MatrixR& q_lat, const MatrixR& q_pe,
                                      const LatentCache& cache, double scale) {
  const int64_t H = q_lat.rows();
  if (q_pe.rows() != H || q_lat.cols() != cache.x.cols() || q_pe.cols() != cache.k_pe.cols() ||
      cache.x.rows() != cache.k_pe.rows()) {
    throw InputError("absorbed_decode_core: q_lat " + dims(q_lat.rows(), q_lat.cols()) +
                     ", q_pe " + dims(q_pe.rows(), q_pe.cols()) + " do not match cache x " +
                     dims(cache.x.rows(), cache.x.cols()) + ", k_pe " +
                     dims(cache.k_pe.rows(), cache.k_pe.cols()));
  }
  if (cache.length() == 0) {
    throw InputError("absorbed_decode_core: empty cache (softmax over no keys is undefined)");
  }
  DecodeCoreResult r{MatrixR(H, q_lat.cols()), VectorD(H)};
  for (int64_t hd = 0; hd < H; ++hd) {
    r.lse[hd] = attend_latent(&q_lat(hd, 0), &q_pe(hd, 0), cache.x, cache.k_pe, cache.length(),
                              scale, &r.o_lat(hd, 0));
  }
  return r;
}

PrefillResult prefill(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h_prompt) {
  PrefillResult r;
  if (h_prompt.rows() == 0) {
    check_input(cfg, h_prompt, 0, "prefill");
    r.cache.x.resize(0, cfg.kv_lora_rank);
    r.cache.k_pe.resize(0, cfg.qk_rope_head_dim);
    r.out.resize(0, cfg.hidden_size);
    return r;
  }
  AttentionTrace trace;
  r.out = attention_naive(cfg, w, h_prompt, 0, &trace);
  r.cache.x = std::move(trace.x);
  r.cache.k_pe = std::move(trace.k_pe);
  return r;
}

MatrixR decode_step(const MlaConfig& cfg, const AttentionWeights& w, LatentCache& cache,
                    const MatrixR& h_token, int64_t pos, AttentionTrace* trace) {
  w.validate(cfg);
  if (h_token.rows() != 1) {
    throw InputError("decode_step: expected one token, got " + std::to_string(h_token.rows()));
  }
  const QueryParts q = project_queries(cfg, w, h_token, pos);
  MatrixR c;
  const LatentCache fresh = compute_latent(cfg, w, h_token, pos, &c);
  cache.append(fresh.x, fresh.k_pe);
  MatrixR q_lat, o_lat, lse;
  const std::vector<int64_t> key_limit{cache.length()};  // the whole cache, itself included
  MatrixR o = absorbed_core_rows(cfg, w, q, cache, key_limit, q_lat, o_lat, lse);
  MatrixR out = o * w.o_proj.transpose();
  if (trace)
    *trace = absorbed_trace(q, std::move(c), fresh, std::move(q_lat), std::move(o_lat), std::move(lse), std::move(o));
  return out;
}

MatrixR prefill_then_decode(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                            int64_t P) {
  if (P < 0 || P > h.rows()) {
    throw InputError("prefill_then_decode: prompt length " + std::to_string(P) +
                     " outside [0, " + std::to_string(h.rows()) + "]");
  }
  PrefillResult pre = prefill(cfg, w, h.topRows(P));
  MatrixR out(h.rows(), cfg.hidden_size);
  out.topRows(P) = pre.out;
  for (int64_t t = P; t < h.rows(); ++t) {
    out.row(t) = decode_step(cfg, w, pre.cache, h.middleRows(t, 1), t).row(0);
  }
  return out;
}

}  // namespace mla::model
