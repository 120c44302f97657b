#include "model/dense_forward.hpp"

#include <cmath>
#include <limits>
#include <numbers>
#include <thread>

#include "core/error.hpp"
#include "model/rmsnorm.hpp"

namespace mla::model {
namespace {

std::string dims(int64_t r, int64_t c) { return "[" + std::to_string(r) + ", " + std::to_string(c) + "]"; }

MatrixR load_checked(const TensorLoader& load, const std::string& name, int64_t rows, int64_t cols) {
  MatrixR m = load(name);
  if (m.rows() != rows || m.cols() != cols)
    throw InputError("tensor '" + name + "' has shape " + dims(m.rows(), m.cols()) + ", expected " +
                     dims(rows, cols));
  return m;
}

// 1-D tensors arrive as a 1 x n row.
VectorD load_vector(const TensorLoader& load, const std::string& name, int64_t n) {
  MatrixR m = load(name);
  if (m.size() != n || (m.rows() != 1 && m.cols() != 1))
    throw InputError("tensor '" + name + "' has shape " + dims(m.rows(), m.cols()) + ", expected [" +
                     std::to_string(n) + "]");
  return Eigen::Map<const VectorD>(m.data(), n);
}

}  // namespace

DenseModel load_dense_model(const MlaConfig& cfg, const TensorLoader& load, bool tied_embeddings) {
  if (cfg.n_routed_experts > 0 && cfg.first_k_dense_replace < cfg.num_hidden_layers)
    throw InputError("config: layers " + std::to_string(cfg.first_k_dense_replace) + ".." +
                     std::to_string(cfg.num_hidden_layers - 1) + " are MoE (n_routed_experts = " +
                     std::to_string(cfg.n_routed_experts) + ", first_k_dense_replace = " +
                     std::to_string(cfg.first_k_dense_replace) +
                     "); the dense forward supports dense-MLP models only");
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, I = cfg.intermediate_size;
  const int64_t H = cfg.num_heads, dc = cfg.kv_lora_rank, dr = cfg.qk_rope_head_dim;
  const int64_t dqk = cfg.qk_head_dim(), dv = cfg.v_head_dim, dn = cfg.qk_nope_head_dim;
  DenseModel m;
  m.cfg = cfg;
  m.embed_tokens = load_checked(load, "model.embed_tokens.weight", V, D);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string a = p + "self_attn.";
    DenseLayerWeights L;
    L.input_layernorm = load_vector(load, p + "input_layernorm.weight", D);
    L.post_attention_layernorm = load_vector(load, p + "post_attention_layernorm.weight", D);
    if (cfg.has_q_lora()) {
      L.attn.q_a_proj = load_checked(load, a + "q_a_proj.weight", cfg.q_lora_rank, D);
      L.attn.q_a_layernorm = load_vector(load, a + "q_a_layernorm.weight", cfg.q_lora_rank);
      L.attn.q_b_proj = load_checked(load, a + "q_b_proj.weight", H * dqk, cfg.q_lora_rank);
    } else {
      L.attn.q_proj = load_checked(load, a + "q_proj.weight", H * dqk, D);
    }
    L.attn.kv_a_proj_with_mqa = load_checked(load, a + "kv_a_proj_with_mqa.weight", dc + dr, D);
    L.attn.kv_a_layernorm = load_vector(load, a + "kv_a_layernorm.weight", dc);
    L.attn.kv_b_proj = load_checked(load, a + "kv_b_proj.weight", H * (dn + dv), dc);
    L.attn.o_proj = load_checked(load, a + "o_proj.weight", D, H * dv);
    L.attn.validate(cfg);
    L.gate_proj = load_checked(load, p + "mlp.gate_proj.weight", I, D);
    L.up_proj = load_checked(load, p + "mlp.up_proj.weight", I, D);
    L.down_proj = load_checked(load, p + "mlp.down_proj.weight", D, I);
    m.layers.push_back(std::move(L));
  }
  m.final_norm = load_vector(load, "model.norm.weight", D);
  if (tied_embeddings) {
    m.lm_head = m.embed_tokens;
  } else {
    m.lm_head = load_checked(load, "lm_head.weight", V, D);
  }
  return m;
}

MatrixR swiglu_mlp(const DenseLayerWeights& w, const MatrixR& y) {
  const MatrixR g = y * w.gate_proj.transpose();
  const MatrixR u = y * w.up_proj.transpose();
  // silu(g) = g / (1 + exp(-g)), as torch.nn.functional.silu.
  const MatrixR act = g.unaryExpr([](double v) { return v / (1.0 + std::exp(-v)); }).cwiseProduct(u);
  return act * w.down_proj.transpose();
}

MatrixR dense_forward(const DenseModel& m, std::span<const int32_t> tokens, ForwardTrace* trace) {
  const MlaConfig& cfg = m.cfg;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = cfg.hidden_size, V = cfg.vocab_size;
  if (T == 0) throw InputError("dense_forward: empty token sequence");
  MatrixR x(T, D);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= V)
      throw InputError("dense_forward: token " + std::to_string(id) + " at index " + std::to_string(t) +
                       " is outside the vocabulary [0, " + std::to_string(V) + ")");
    x.row(t) = m.embed_tokens.row(id);
  }
  if (trace) {
    trace->hidden.clear();
    trace->attn_out.clear();
  }
  for (const DenseLayerWeights& L : m.layers) {
    const MatrixR h = rmsnorm(x, L.input_layernorm, cfg.rms_norm_eps);
    const MatrixR a = attention_naive(cfg, L.attn, h, /*pos0=*/0);
    x += a;
    x += swiglu_mlp(L, rmsnorm(x, L.post_attention_layernorm, cfg.rms_norm_eps));
    if (trace && trace->want_hidden) trace->hidden.push_back(h);
    if (trace && trace->want_attn_out) trace->attn_out.push_back(a);
  }
  return rmsnorm(x, m.final_norm, cfg.rms_norm_eps) * m.lm_head.transpose();
}

WindowNll next_token_nll(const MatrixR& logits, std::span<const int32_t> tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (logits.rows() != T)
    throw InputError("next_token_nll: " + std::to_string(logits.rows()) + " logit rows for " +
                     std::to_string(T) + " tokens");
  WindowNll r;
  for (int64_t t = 1; t < T; ++t) {
    const auto row = logits.row(t - 1);
    const double mx = row.maxCoeff();
    const double lse = mx + std::log((row.array() - mx).exp().sum());
    const int32_t target = tokens[static_cast<size_t>(t)];
    if (target < 0 || target >= logits.cols())
      throw InputError("next_token_nll: token " + std::to_string(target) + " outside [0, " +
                       std::to_string(logits.cols()) + ")");
    r.nll_sum += lse - row(target);
    ++r.predicted;
  }
  return r;
}

double PerplexityResult::bits_per_token() const {
  return predicted ? nll_sum / static_cast<double>(predicted) / std::numbers::ln2 : 0.0;
}
double PerplexityResult::perplexity() const {
  return predicted ? std::exp(nll_sum / static_cast<double>(predicted)) : 0.0;
}

PerplexityResult evaluate_windows(const DenseModel& m, const std::vector<std::vector<int32_t>>& windows,
                                  int threads) {
  const size_t n = windows.size();
  const size_t nt = static_cast<size_t>(std::max(1, threads));
  // Per-window results, summed in window order afterwards so the total does not depend on
  // the thread count.
  std::vector<WindowNll> per(n);
  std::vector<std::exception_ptr> errors(nt);
  auto work = [&](size_t k) {
    try {
      for (size_t i = k; i < n; i += nt) per[i] = next_token_nll(dense_forward(m, windows[i]), windows[i]);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (size_t k = 1; k < nt; ++k) pool.emplace_back(work, k);
  work(0);
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  PerplexityResult r;
  r.windows = static_cast<int64_t>(n);
  for (const WindowNll& w : per) {
    r.nll_sum += w.nll_sum;
    r.predicted += w.predicted;
  }
  return r;
}

}  // namespace mla::model
