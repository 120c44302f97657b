#include "verify/verify_decode.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/byte_text.hpp"
#include "io/capture.hpp"
#include "io/checkpoint.hpp"
#include "io/converted_checkpoint.hpp"
#include "io/fingerprint.hpp"
#include "io/mla_weights.hpp"
#include "model/attention_reference.hpp"
#include "model/dense_forward.hpp"
#include "model/rmsnorm.hpp"
#include "verify/backend_common.hpp"
#include "verify/decode_backend.hpp"
#include "transform/kv4_params.hpp"
#include "verify/fp8_backend.hpp"
#include "verify/multi_device_runner.hpp"
#include "verify/paired_stats.hpp"
#include "verify/tpla_causal.hpp"

namespace mla::verify {
namespace fs = std::filesystem;
using model::AttentionWeights;
using model::MlaConfig;

namespace {

// Page-table entries past a sequence's pages: a value no kernel may dereference.
constexpr int32_t kPageSentinel = 1 << 30;

struct LayerContext {
  int64_t layer = 0;
  MlaConfig cfg;                     // the original model's
  AttentionWeights original;         // float64, original checkpoint
  std::vector<io::RankAttention> ranks;
  std::vector<int> group_of;         // per rank
  int tp = 1, g = 1;
  bool exact_norm = false;
};

struct ConvertedOutputs {
  std::vector<MatrixR> kernel;  // per sequence [T, D]
  std::vector<MatrixR> f64;     // per sequence [T, D]
};

// Per rank and sequence: its latent slice c_k, k_pe, and absorbed queries (mu folded in).
struct RankSeq {
  MatrixR c, x_local, k_pe, q_lat, q_pe;
};

std::vector<std::vector<RankSeq>> project_ranks(const LayerContext& L, const std::vector<MatrixR>& h) {
  const int64_t B = static_cast<int64_t>(h.size());
  std::vector<std::vector<RankSeq>> rs(L.tp, std::vector<RankSeq>(B));
  for (int r = 0; r < L.tp; ++r) {
    const auto& cfg_r = L.ranks[r].config;
    const auto& w_r = L.ranks[r].weights;
    for (int64_t b = 0; b < B; ++b) {
      RankSeq& s = rs[r][b];
      model::LatentCache lc = model::compute_latent(cfg_r, w_r, h[b], 0, &s.c);
      s.x_local = std::move(lc.x);
      s.k_pe = std::move(lc.k_pe);
      model::QueryParts q = model::project_queries(cfg_r, w_r, h[b], 0);
      s.q_lat = model::absorb_queries(cfg_r, w_r, q.q_nope);
      s.q_pe = std::move(q.q_pe);
    }
  }
  return rs;
}

// Exact global rms per token from one rank of each group (the all-reduced sum of squares).
std::vector<VectorD> global_rms(const LayerContext& L, const std::vector<std::vector<RankSeq>>& rs, int64_t B,
                                int64_t n_tok) {
  const double eps = L.cfg.rms_norm_eps;
  std::vector<int> group_rep(L.g, -1);
  for (int r = 0; r < L.tp; ++r)
    if (group_rep[L.group_of[r]] < 0) group_rep[L.group_of[r]] = r;
  const int64_t d_c_global = L.cfg.kv_lora_rank;
  std::vector<VectorD> rms_global(B, VectorD::Zero(n_tok));
  for (int64_t b = 0; b < B; ++b) {
    for (int k = 0; k < L.g; ++k) rms_global[b] += rs[group_rep[k]][b].c.rowwise().squaredNorm();
    rms_global[b] = (rms_global[b] / static_cast<double>(d_c_global)).array().unaryExpr([&](double v) {
      return std::sqrt(v + eps);
    });
  }
  return rms_global;
}

// Rank r's cache rows: prompt rows hold the exact global x (PD separation), decoded rows the
// rank's own normalisation (approx) or the all-reduced one (exact).
std::vector<MatrixR> rank_cache_rows(const LayerContext& L, int r, const std::vector<RankSeq>& seqs,
                                     const std::vector<VectorD>& rms_global, int64_t P, int64_t n_tok) {
  const auto& w_r = L.ranks[r].weights;
  const int64_t B = static_cast<int64_t>(seqs.size()), d_c = L.ranks[r].config.kv_lora_rank;
  std::vector<MatrixR> X(B);
  for (int64_t b = 0; b < B; ++b) {
    const RankSeq& s = seqs[b];
    X[b].resize(n_tok, d_c);
    for (int64_t t = 0; t < n_tok; ++t) {
      if (t < P) {
        X[b].row(t) = s.c.row(t) / rms_global[b](t);
      } else if (L.exact_norm) {
        X[b].row(t) = (s.c.row(t) / rms_global[b](t)).cwiseProduct(w_r.kv_a_layernorm.transpose());
      } else {
        X[b].row(t) = s.x_local.row(t);
      }
    }
  }
  return X;
}

// The converted TPLA decode of one layer for a batch of sequences h[b] [P + T, D].
ConvertedOutputs run_converted(const LayerContext& L, const std::vector<MatrixR>& h, int64_t P, int64_t T,
                               DecodeBackend* backend, int page_size, uint64_t seed, bool want_f64 = true) {
  const int64_t B = static_cast<int64_t>(h.size());
  const int64_t D = L.cfg.hidden_size;
  const int64_t n_tok = P + T;
  ConvertedOutputs out;
  out.kernel.assign(B, MatrixR::Zero(T, D));
  out.f64.assign(B, MatrixR::Zero(T, D));

  if (backend) backend->begin_layer(L.layer);
  const std::vector<std::vector<RankSeq>> rs = project_ranks(L, h);
  const std::vector<VectorD> rms_global = global_rms(L, rs, B, n_tok);

  const int64_t pages_per_seq = (n_tok + page_size - 1) / page_size;
  for (int r = 0; r < L.tp; ++r) {
    const auto& cfg_r = L.ranks[r].config;
    const auto& w_r = L.ranks[r].weights;
    const int64_t H_r = cfg_r.num_heads, d_c = cfg_r.kv_lora_rank, d_r = cfg_r.qk_rope_head_dim;
    const int64_t dim = d_c + d_r;
    const double scale = cfg_r.softmax_scale();

    const std::vector<MatrixR> X = rank_cache_rows(L, r, rs[r], rms_global, P, n_tok);

    // ---- kernel path: paged bf16 cache, random page placement, sentinel past the end ----
    if (backend) {  // without one (--no-kernel) only the float64 path below runs
      CacheShape shape;
      shape.batch = static_cast<int>(B);
      shape.page_size = page_size;
      shape.max_pages = static_cast<int>(pages_per_seq + 1);
      shape.num_pages = static_cast<int>(B * pages_per_seq + 3);  // a few never-used (poisoned) pages
      shape.dim = static_cast<int>(dim);
      std::vector<int32_t> perm(shape.num_pages);
      std::iota(perm.begin(), perm.end(), 0);
      std::mt19937_64 rng(seed + 7919 * static_cast<uint64_t>(r));
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int32_t> table(size_t(B) * shape.max_pages, kPageSentinel);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t p = 0; p < pages_per_seq; ++p) table[b * shape.max_pages + p] = perm[b * pages_per_seq + p];
      const int cache = backend->create_cache(shape, table);

      auto pack_rows = [&](int64_t t0, int64_t n) {
        std::vector<uint16_t> kv(size_t(B) * n * dim);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < n; ++i) {
            uint16_t* row = kv.data() + (b * n + i) * dim;
            for (int64_t j = 0; j < d_c; ++j) row[j] = double_to_bf16(X[b](t0 + i, j));
            for (int64_t j = 0; j < d_r; ++j) row[d_c + j] = double_to_bf16(rs[r][b].k_pe(t0 + i, j));
          }
        return kv;
      };
      if (P > 0) backend->append(cache, pack_rows(0, P), static_cast<int>(P), std::vector<int32_t>(B, 0));

      std::vector<uint16_t> q(size_t(B) * H_r * dim), o_bits;
      std::vector<float> lse;
      for (int64_t t = P; t < n_tok; ++t) {
        backend->append(cache, pack_rows(t, 1), 1, std::vector<int32_t>(B, static_cast<int32_t>(t)));
        for (int64_t b = 0; b < B; ++b)
          for (int64_t hh = 0; hh < H_r; ++hh) {
            uint16_t* row = q.data() + (b * H_r + hh) * dim;
            for (int64_t j = 0; j < d_c; ++j) row[j] = double_to_bf16(rs[r][b].q_lat(t, hh * d_c + j));
            for (int64_t j = 0; j < d_r; ++j) row[d_c + j] = double_to_bf16(rs[r][b].q_pe(t, hh * d_r + j));
          }
        backend->decode(cache, q, static_cast<int>(H_r), static_cast<int>(d_c), static_cast<int>(d_r),
                       std::vector<int32_t>(B, static_cast<int32_t>(t + 1)), static_cast<float>(scale), o_bits, lse);
        for (int64_t b = 0; b < B; ++b) {
          MatrixR o_lat(1, H_r * d_c);
          for (int64_t j = 0; j < H_r * d_c; ++j) o_lat(0, j) = bf16_to_float(o_bits[b * H_r * d_c + j]);
          const MatrixR o = model::expand_latent_output(cfg_r, w_r, o_lat);
          out.kernel[b].row(t - P) += o * w_r.o_proj.transpose();
        }
      }
    }

    // ---- float64 path: the same computation without bf16 or kernels ----
    for (int64_t b = 0; b < B && want_f64; ++b) {
      for (int64_t t = P; t < n_tok; ++t) {
        model::LatentCache c;
        c.x = X[b].topRows(t + 1);
        c.k_pe = rs[r][b].k_pe.topRows(t + 1);
        const MatrixR q_lat = Eigen::Map<const MatrixR>(rs[r][b].q_lat.row(t).data(), H_r, d_c);
        const MatrixR q_pe = Eigen::Map<const MatrixR>(rs[r][b].q_pe.row(t).data(), H_r, d_r);
        const model::DecodeCoreResult core = model::absorbed_decode_core(q_lat, q_pe, c, scale);
        const MatrixR o_lat = Eigen::Map<const MatrixR>(core.o_lat.data(), 1, H_r * d_c);
        const MatrixR o = model::expand_latent_output(cfg_r, w_r, o_lat);
        out.f64[b].row(t - P) += o * w_r.o_proj.transpose();
      }
    }
  }
  return out;
}

std::vector<double> flatten(const std::vector<MatrixR>& ms) {
  std::vector<double> v;
  for (const auto& m : ms) v.insert(v.end(), m.data(), m.data() + m.size());
  return v;
}

LayerContext load_layer(const io::Checkpoint& orig, const fs::path& converted, int tp, int64_t layer,
                        const AttentionWeights* original_weights) {
  LayerContext L;
  L.layer = layer;
  L.cfg = orig.config();
  L.original = original_weights ? *original_weights : io::load_attention_weights(orig, layer);
  L.tp = tp;
  for (int r = 0; r < tp; ++r) {
    L.ranks.push_back(io::load_rank_attention(converted / io::rank_dir_name(r, tp), layer));
    const auto& t = L.ranks.back().tpla;
    L.group_of.push_back(t.at("group").get<int>());
    L.g = t.at("g").get<int>();
    L.exact_norm = t.at("norm").get<std::string>() == "exact";
  }
  return L;
}

int detect_tp(const fs::path& converted) {
  const fs::path manifest = converted / "manifest.json";
  if (!fs::exists(manifest)) throw InputError(converted.string() + ": no manifest.json (not an mla-convert output?)");
  std::ifstream in(manifest);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError(manifest.string() + ": not valid JSON: " + e.what());
  }
  if (!j.contains("ranks") || !j["ranks"].is_number_integer())
    throw InputError(manifest.string() + ": field 'ranks' missing or not an integer");
  return j["ranks"].get<int>();
}

// The first n_tok rows of sequences 0..n_seq-1 of one layer's attention input, as float64.
std::vector<MatrixR> read_sequences(const io::CaptureReader& cap, const std::string& file, const std::string& group,
                                    int64_t layer, int64_t n_seq, int64_t n_tok) {
  const io::CaptureGroupInfo gi = cap.group_info(group);
  const int64_t D = cap.meta().hidden_size;
  if (gi.sequences < n_seq)
    throw InputError(file + ": /" + group + " has " + std::to_string(gi.sequences) + " sequences, --sequences asks " +
                     std::to_string(n_seq));
  if (gi.seq_len < n_tok)
    throw InputError(file + ": /" + group + " sequences have " + std::to_string(gi.seq_len) +
                     " tokens, --prefill + --decode need " + std::to_string(n_tok));
  std::vector<MatrixR> out;
  for (int64_t s = 0; s < n_seq; ++s) {
    const std::vector<float> row = cap.hidden(group, layer, s);
    MatrixR m = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                    row.data(), gi.seq_len, D).topRows(n_tok).cast<double>();
    if (!m.allFinite())
      throw InputError(file + ": /" + group + "/" + io::capture_layer_path(layer, "hidden") + " sequence " +
                       std::to_string(s) + " has NaN/Inf");
    out.push_back(std::move(m));
  }
  return out;
}

// Per-row relative L2 of y vs r over the batch: the worst (sequence, token).
void worst_row(const std::vector<MatrixR>& y, const std::vector<MatrixR>& r, LayerReport& rep) {
  for (size_t b = 0; b < y.size(); ++b)
    for (int64_t t = 0; t < y[b].rows(); ++t) {
      const double denom = r[b].row(t).norm();
      const double e = (y[b].row(t) - r[b].row(t)).norm() / (denom > 0 ? denom : 1.0);
      if (e > rep.worst_row_rel_l2 || rep.worst_sequence < 0) {
        rep.worst_row_rel_l2 = e;
        rep.worst_sequence = static_cast<int64_t>(b);
        rep.worst_token = t;
      }
    }
}

// End-to-end windows taken from --perplexity-text by default: 512 windows of 32 + 224 bytes
// (114K scored tokens) give a 95% interval ~0.2% of the loss wide for tiny-v3 at tp = 2 with
// PCA (docs/calibration.md).
constexpr int64_t kDefaultTextWindows = 512;

// Token windows of the end-to-end comparison: the capture group's first windows, or windows
// of prefill + decode bytes spread evenly over --perplexity-text (disjoint text, so their
// losses are close to independent: the interval's sampling unit).
std::vector<std::vector<int32_t>> end_to_end_windows(const VerifyOptions& o, const io::CaptureReader& cap,
                                                     int64_t n_tok) {
  const int64_t n = o.perplexity_windows > 0      ? o.perplexity_windows
                    : o.perplexity_text.empty() ? o.sequences
                                                : kDefaultTextWindows;
  std::vector<std::vector<int32_t>> w;
  if (!o.perplexity_text.empty()) {
    const auto all = io::byte_windows(io::read_bytes(o.perplexity_text), n_tok, 0);
    if (static_cast<int64_t>(all.size()) < n)
      throw InputError(o.perplexity_text.string() + ": holds " + std::to_string(all.size()) + " windows of " +
                       std::to_string(n_tok) + " bytes, --perplexity-windows asks " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) w.push_back(all[static_cast<std::size_t>(i * static_cast<int64_t>(all.size()) / n)]);
    return w;
  }
  const io::CaptureGroupInfo gi = cap.group_info(o.capture_group);
  if (gi.sequences < n || gi.seq_len < n_tok)
    throw InputError(o.activations.string() + ": /" + o.capture_group + " has " + std::to_string(gi.sequences) +
                     " sequences of " + std::to_string(gi.seq_len) + " tokens; the end-to-end comparison needs " +
                     std::to_string(n) + " of " + std::to_string(n_tok) + " (or give --perplexity-text)");
  for (int64_t b = 0; b < n; ++b) {
    w.push_back(cap.tokens(o.capture_group, b));
    w.back().resize(static_cast<std::size_t>(n_tok));
  }
  return w;
}

// End to end on a dense model, one chunk of windows at a time: the original in float64 and the
// converted model (prefill exact with PD separation, every decoded position through the TPLA
// ranks on the kernels; every other tensor from the original: Megatron sharding of MLP/norms is
// exact). Without PD separation every position, prompt included, goes through TPLA. Both sides
// score the same rows P .. P+T-2 (next-token predictions of tokens P+1 .. P+T-1).
void run_end_to_end(const VerifyOptions& o, const io::Checkpoint& orig, int tp,
                    const std::vector<std::vector<int32_t>>& windows, PerplexityReport& out,
                    MultiDeviceRunner* runner, const transform::Kv4Params* kv4) {
  const MlaConfig& cfg = orig.config();
  const model::DenseModel m = model::load_dense_model(
      cfg, [&](const std::string& n) { return orig.load_matrix(n); },
      orig.config_json().value("tie_word_embeddings", false));
  const int64_t n_tok = o.prefill + o.decode;
  const int64_t p_run = o.pd_separation ? o.prefill : 0;
  std::vector<LayerContext> layers;
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i)
    layers.push_back(load_layer(orig, o.converted, tp, i, &m.layers[static_cast<std::size_t>(i)].attn));
  const bool kernel_path = o.perplexity_path == "kernel";
  if (!kernel_path && o.perplexity_path != "f64")
    throw InputError("--perplexity-path must be f64 or kernel, got '" + o.perplexity_path + "'");
  if (runner && !kernel_path)
    spdlog::warn("--devices: the end-to-end comparison runs on the ranks' devices only with --perplexity-path kernel");
  const auto chunk = static_cast<std::size_t>(std::max<int64_t>(1, o.perplexity_chunk));
  out.original.assign(windows.size(), {});
  out.converted.assign(windows.size(), {});
  auto run_chunk = [&](std::size_t c0) {
    const std::size_t c1 = std::min(windows.size(), c0 + chunk);
    const auto B = static_cast<int64_t>(c1 - c0);
    std::vector<MatrixR> x(static_cast<std::size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      x[b].resize(n_tok, cfg.hidden_size);
      for (int64_t t = 0; t < n_tok; ++t) x[b].row(t) = m.embed_tokens.row(windows[c0 + b][t]);
    }
    // A fresh backend per chunk releases the chunk's caches.
    std::unique_ptr<DecodeBackend> backend;
    if (kernel_path) backend = make_kv_backend(o.device, o.kv, kv4, o.kv4_route);
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
      const auto& lw = m.layers[static_cast<std::size_t>(i)];
      const LayerContext& L = layers[static_cast<std::size_t>(i)];
      std::vector<MatrixR> h(static_cast<std::size_t>(B));
      for (int64_t b = 0; b < B; ++b) h[b] = model::rmsnorm(x[b], lw.input_layernorm, cfg.rms_norm_eps);
      ConvertedOutputs conv;
      if (kernel_path) {
        conv = run_converted(L, h, p_run, n_tok - p_run, backend.get(), o.page_size, o.seed, /*want_f64=*/false);
        if (runner) {
          // The ranks on their devices stand for the kernel path; they must equal it.
          std::vector<MatrixR> multi =
              o.dcp ? runner->decode_layer_dcp(i, L.cfg, L.ranks.at(0), h, p_run, n_tok - p_run, o.page_size, o.seed)
                    : runner->decode_layer(i, L.cfg, L.ranks, h, p_run, n_tok - p_run, o.page_size, o.seed);
          const double rel = model::compare(flatten(multi), flatten(conv.kernel)).rel_l2;
          const double tol = o.dcp ? o.kernel_rel_l2 : kDevicesRelTolerance;
          if (!(rel <= tol))
            throw VerificationError("end to end, layer " + std::to_string(i) + ": " + runner->name() +
                                    " differ from the one-device decode by rel_l2 " + std::to_string(rel) +
                                    " (tolerance " + std::to_string(tol) + ")");
          conv.kernel = std::move(multi);
        }
      } else {
        const TplaLayerView view{&L.cfg, &L.ranks, &L.group_of, L.g, L.exact_norm};
        for (int64_t b = 0; b < B; ++b) conv.kernel.push_back(tpla_attention_f64(view, h[b], p_run));
      }
      for (int64_t b = 0; b < B; ++b) {
        // Causal: the prompt rows' exact outputs need the prompt rows alone.
        MatrixR attn(n_tok, cfg.hidden_size);
        if (p_run > 0) attn.topRows(p_run) = model::attention_naive(cfg, lw.attn, h[b].topRows(p_run), 0);
        attn.bottomRows(n_tok - p_run) = conv.kernel[b];
        x[b] += attn;
        x[b] += model::swiglu_mlp(lw, model::rmsnorm(x[b], lw.post_attention_layernorm, cfg.rms_norm_eps));
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      const auto& tok = windows[c0 + b];
      out.original[c0 + b] = score_tokens(model::dense_forward(m, tok), tok, o.prefill, n_tok);
      const MatrixR logits_conv = model::rmsnorm(x[b], m.final_norm, cfg.rms_norm_eps) * m.lm_head.transpose();
      out.converted[c0 + b] = score_tokens(logits_conv, tok, o.prefill, n_tok);
    }
  };
  // Chunks on worker threads (CPU only; the CUDA backend and the multi-device runner, which
  // runs one layer at a time, are driven from one thread). Results
  // land at their window's index, so they do not depend on the thread count.
  const int threads = kernel_path && (o.device == "cuda" || runner)
                          ? 1
                          : static_cast<int>(std::max<int64_t>(
                                1, o.threads > 0 ? o.threads : std::thread::hardware_concurrency()));
  std::atomic<std::size_t> next{0}, done{0};
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  std::mutex log_mutex;
  auto worker = [&](int k) {
    try {
      for (std::size_t c0; (c0 = next.fetch_add(chunk)) < windows.size();) {
        run_chunk(c0);
        const std::size_t d = done += std::min(chunk, windows.size() - c0);
        std::lock_guard<std::mutex> lock(log_mutex);
        spdlog::info("end to end: {}/{} windows done", d, windows.size());
      }
    } catch (...) {
      errors[static_cast<std::size_t>(k)] = std::current_exception();
      next = windows.size();
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < threads; ++k) pool.emplace_back(worker, k);
  worker(0);
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  out.paired = compare_paired(out.original, out.converted, o.confidence);
  out.ran = true;
  out.windows = out.paired.windows;
  out.predicted = out.paired.tokens;
  out.original_bits_per_byte = out.paired.base_bits;
  out.converted_bits_per_byte = out.paired.test_bits;
  out.loss_pass = o.max_loss_increase.passes(out.paired);
}

}  // namespace

VerifyReport verify_decode(const VerifyOptions& o) {
  if (o.prefill < 0 || o.decode < 1) throw InputError("--prefill must be >= 0 and --decode >= 1");
  if (o.sequences < 1) throw InputError("--sequences must be >= 1");
  if (o.page_size != 64 && o.page_size != 128) throw InputError("--page-size must be 64 or 128, got " + std::to_string(o.page_size));
  if (!o.skip_manifest_check) io::check_manifest(o.converted, o.original);
  // Without --no-kernel every decoded token also runs through the decode kernels (or their CPU
  // twins); with it, only the float64 converted path runs (slice widths no kernel supports).
  if (!o.kernel) {
    const std::string clash = o.devices > 0 ? "--devices " + std::to_string(o.devices)
                              : o.kv != "bf16" ? "--kv " + o.kv
                              : o.perplexity_path == "kernel" ? "--perplexity-path kernel" : "";
    if (!clash.empty())
      throw InputError("--no-kernel runs the float64 path only: it cannot be combined with " + clash);
  }
  if (o.kv != "bf16" && o.dcp) throw InputError("--kv " + o.kv + " with --dcp: DCP ranks hold the bf16 cache only");
  checked_kv4_route(o.kv, o.kv4_route);  // before any file is read

  const io::Checkpoint orig = io::Checkpoint::open(o.original);
  const MlaConfig& cfg = orig.config();
  // --kv fp4 | codebook: the per-layer parameters fitted by mla-calibrate.
  std::optional<transform::Kv4Params> kv4;
  if (transform::is_kv4_format(o.kv)) {
    const transform::Kv4Choice choice{o.fp4_rule, o.fp4_c, o.kv4_protect};
    if (!o.calib.empty()) {
      kv4 = transform::load_kv4_params(o.calib, o.kv, cfg.attention_layers(), choice);
    } else {
      // A --kv fp4|codebook conversion records its parameters (rank 0's config.json kv_cache).
      const fs::path rc = o.converted / io::rank_dir_name(0, detect_tp(o.converted)) / "config.json";
      std::ifstream in(rc);
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("kv_cache"))
        throw InputError("--kv " + o.kv + " needs --calib calib.h5 (mla-calibrate's fitted c and codebooks), or a "
                         "checkpoint converted with --kv " + o.kv + " (" + rc.string() + " has no kv_cache section)");
      kv4 = transform::kv4_params_from_section(j["kv_cache"], rc.string(), choice);
      if (kv4->format != o.kv)
        throw InputError("--kv " + o.kv + ": " + rc.string() + " records the " + kv4->format + " format");
      if (static_cast<int64_t>(kv4->layers.size()) < cfg.attention_layers())
        throw InputError(rc.string() + ": kv_cache has " + std::to_string(kv4->layers.size()) + " layers, the model " +
                         std::to_string(cfg.attention_layers()));
    }
  } else if (!o.calib.empty()) {
    throw InputError("--calib is read with --kv fp4 or codebook only (got --kv " + o.kv + ")");
  }
  std::unique_ptr<DecodeBackend> backend;
  if (o.kernel) backend = make_kv_backend(o.device, o.kv, kv4 ? &*kv4 : nullptr, o.kv4_route);
  const int tp = detect_tp(o.converted);
  std::vector<int64_t> layers = o.layers;
  if (layers.empty())
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) layers.push_back(i);
  for (int64_t l : layers)
    if (l < 0 || l >= cfg.attention_layers())
      throw InputError("--layers: layer " + std::to_string(l) + " out of range [0, " + std::to_string(cfg.attention_layers()) + ")");

  const io::CaptureReader cap(o.activations);
  const std::string cap_file = o.activations.string();
  if (cap.meta().hidden_size != cfg.hidden_size || cap.meta().num_layers < cfg.num_hidden_layers)
    throw InputError(cap_file + ": capture has hidden_size " + std::to_string(cap.meta().hidden_size) + " and " +
                     std::to_string(cap.meta().num_layers) + " layers; " + o.original.string() + " has " +
                     std::to_string(cfg.hidden_size) + " and " + std::to_string(cfg.num_hidden_layers));
  if (!cap.has_group(o.capture_group))
    throw InputError(cap_file + ": capture has no group '/" + o.capture_group + "'");
  const int64_t n_tok = o.prefill + o.decode;

  VerifyReport rep;
  rep.backend = backend ? backend->name() : "none (float64 converted path only)";
  // --devices: every rank also runs on its own device; its output must equal the one-device
  // sequential sum, and then stands for the kernel path in the report.
  std::unique_ptr<MultiDeviceRunner> runner;
  if (o.dcp && o.devices < 1) throw InputError("--dcp needs --devices N (the ranks sharing the tokens)");
  if (o.devices > 0) {
    runner = std::make_unique<MultiDeviceRunner>(o.device, o.devices, o.comm);
    // Each rank's cache in the --kv format (its own backend, made on its thread and device).
    if (o.kv != "bf16")
      runner->set_backend_factory([&] { return make_kv_backend(o.device, o.kv, kv4 ? &*kv4 : nullptr, o.kv4_route); });
    rep.devices = (o.dcp ? "DCP, tokens shared by " : "TPLA ranks on ") + runner->name();
  }
  // DCP is exact: it must equal the one-device decode within the BF16 kernels' tolerance; TPLA
  // ranks do the one-device arithmetic and must equal it up to float64 summation order.
  const double devices_tolerance = o.dcp ? o.kernel_rel_l2 : kDevicesRelTolerance;
  rep.pass = true;
  {
    const auto r0 = io::load_rank_attention(o.converted / io::rank_dir_name(0, tp), layers.front());
    rep.tp = tp;
    rep.g = r0.tpla.at("g").get<int>();
    rep.reparam = r0.tpla.value("reparam", "?");
    rep.norm = r0.tpla.value("norm", "?");
  }
  spdlog::info("verify-decode: tp={} g={} reparam={} norm={} backend={}; {} sequences x (prefill {} + decode {})", rep.tp,
               rep.g, rep.reparam, rep.norm, rep.backend, o.sequences, o.prefill, o.decode);

  for (int64_t layer : layers) {
    const std::vector<MatrixR> h = read_sequences(cap, cap_file, o.capture_group, layer, o.sequences, n_tok);
    const LayerContext L = load_layer(orig, o.converted, tp, layer, nullptr);
    std::vector<MatrixR> ref;
    for (const auto& hb : h) ref.push_back(model::attention_naive(cfg, L.original, hb, 0).bottomRows(o.decode));
    // Without PD separation the prompt goes through TPLA too: every position is decoded, and
    // the last T rows (the same positions) are compared.
    const int64_t p_run = o.pd_separation ? o.prefill : 0;
    ConvertedOutputs conv = run_converted(L, h, p_run, n_tok - p_run, backend.get(), o.page_size, o.seed);
    if (!backend) conv.kernel = conv.f64;  // the float64 path stands for the converted decode
    model::ErrorMetrics devices_vs_sequential;
    if (runner) {
      std::vector<MatrixR> multi =
          o.dcp ? runner->decode_layer_dcp(layer, L.cfg, L.ranks.at(0), h, p_run, n_tok - p_run, o.page_size, o.seed)
                : runner->decode_layer(layer, L.cfg, L.ranks, h, p_run, n_tok - p_run, o.page_size, o.seed);
      devices_vs_sequential = model::compare(flatten(multi), flatten(conv.kernel));
      conv.kernel = std::move(multi);
    }
    for (auto* side : {&conv.kernel, &conv.f64})
      for (auto& m : *side) m = MatrixR(m.bottomRows(o.decode));
    LayerReport lr;
    lr.layer = layer;
    lr.devices_ran = runner != nullptr;
    lr.devices_vs_sequential = devices_vs_sequential;
    const auto ref_flat = flatten(ref), kern_flat = flatten(conv.kernel), f64_flat = flatten(conv.f64);
    lr.converted_vs_original = model::compare(kern_flat, ref_flat);
    lr.f64_path_vs_original = model::compare(f64_flat, ref_flat);
    lr.kernel_vs_f64_path = model::compare(kern_flat, f64_flat);
    worst_row(conv.kernel, ref, lr);
    lr.pass = lr.converted_vs_original.nonfinite_match && lr.converted_vs_original.rel_l2 <= kv_kernel_tolerance(o.kv, o.max_rel_l2, o.kv4_route) &&
              lr.converted_vs_original.cos_diff <= kv_cos_tolerance(o.kv, o.max_cos_diff, o.kv4_route) &&
              lr.kernel_vs_f64_path.rel_l2 <= kv_kernel_tolerance(o.kv, o.kernel_rel_l2, o.kv4_route) &&
              (!lr.devices_ran || (lr.devices_vs_sequential.nonfinite_match &&
                                   lr.devices_vs_sequential.rel_l2 <= devices_tolerance));
    rep.pass = rep.pass && lr.pass;
    spdlog::info("layer {}: converted vs original rel_l2 {:.3e}, kernel vs f64 path {:.3e}{}", layer,
                 lr.converted_vs_original.rel_l2, lr.kernel_vs_f64_path.rel_l2, lr.pass ? "" : "  FAIL");
    rep.layers.push_back(std::move(lr));
  }

  if (o.perplexity) {
    run_end_to_end(o, orig, tp, end_to_end_windows(o, cap, n_tok), rep.perplexity, runner.get(),
                   kv4 ? &*kv4 : nullptr);
    rep.pass = rep.pass && rep.perplexity.loss_pass;
  }
  return rep;
}

nlohmann::json VerifyReport::to_json(const VerifyOptions& o) const {
  auto metrics = [](const model::ErrorMetrics& m) {
    return nlohmann::json{{"rmse", m.rmse}, {"cos_diff", m.cos_diff}, {"rel_l2", m.rel_l2}, {"max_abs", m.max_abs},
                          {"nonfinite_match", m.nonfinite_match}, {"count", m.count}};
  };
  nlohmann::json j;
  j["backend"] = backend;
  j["kv"] = o.kv;
  if (transform::is_kv4_format(o.kv))
    j["kv4"] = {{"calib", o.calib.string()},
                {"fp4_rule", o.fp4_rule},
                {"fp4_c", o.fp4_c ? nlohmann::json(*o.fp4_c) : nlohmann::json("fitted")},
                {"protect", o.kv4_protect},
                {"route", o.kv4_route}};
  if (!devices.empty())
    j["devices"] = {{"runner", devices}, {"rel_l2_tolerance", o.dcp ? o.kernel_rel_l2 : kDevicesRelTolerance}};
  j["tp"] = tp;
  j["g"] = g;
  j["reparam"] = reparam;
  j["norm"] = norm;
  j["prefill"] = o.prefill;
  j["decode"] = o.decode;
  j["sequences"] = o.sequences;
  j["thresholds"] = {{"max_rel_l2", kv_kernel_tolerance(o.kv, o.max_rel_l2, o.kv4_route)},
                     {"max_cos_diff", kv_cos_tolerance(o.kv, o.max_cos_diff, o.kv4_route)},
                     {"kernel_rel_l2", kv_kernel_tolerance(o.kv, o.kernel_rel_l2, o.kv4_route)}};
  j["layers"] = nlohmann::json::array();
  for (const auto& l : layers)
    j["layers"].push_back({{"layer", l.layer},
                           {"converted_vs_original", metrics(l.converted_vs_original)},
                           {"f64_path_vs_original", metrics(l.f64_path_vs_original)},
                           {"kernel_vs_f64_path", metrics(l.kernel_vs_f64_path)},
                           {"devices_vs_sequential", l.devices_ran ? metrics(l.devices_vs_sequential) : nlohmann::json()},
                           {"worst", {{"sequence", l.worst_sequence}, {"token", l.worst_token}, {"rel_l2", l.worst_row_rel_l2}}},
                           {"pass", l.pass}});
  j["pd_separation"] = o.pd_separation;
  if (perplexity.ran) {
    j["perplexity"] = {{"windows", perplexity.windows},
                       {"predicted_tokens", perplexity.predicted},
                       {"scored_rows", {{"from", o.prefill}, {"to", o.prefill + o.decode - 2}}},
                       {"original_bits_per_byte", perplexity.original_bits_per_byte},
                       {"converted_bits_per_byte", perplexity.converted_bits_per_byte},
                       {"paired", paired_json(perplexity.paired)},
                       {"loss_pass", perplexity.loss_pass}};
    if (o.max_loss_increase.given)
      j["perplexity"]["max_loss_increase_bits"] = o.max_loss_increase.bits(perplexity.paired.base_bits);
    // Per-token NLL differences (converted - original, bits), one array per window.
    nlohmann::json diffs = nlohmann::json::array();
    for (std::size_t w = 0; w < perplexity.original.size(); ++w) {
      std::vector<double> d(perplexity.original[w].nll.size());
      for (std::size_t i = 0; i < d.size(); ++i)
        d[i] = (perplexity.converted[w].nll[i] - perplexity.original[w].nll[i]) / std::log(2.0);
      diffs.push_back(d);
    }
    j["perplexity"]["nll_difference_bits"] = std::move(diffs);
  }
  j["pass"] = pass;
  return j;
}

std::string VerifyReport::table(const VerifyOptions& o) const {
  std::ostringstream s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "verify-decode: tp=%d g=%d reparam=%s norm=%s backend=%s\n", tp, g, reparam.c_str(),
                norm.c_str(), backend.c_str());
  s << buf;
  std::snprintf(buf, sizeof buf, "%5s  %10s %10s %10s  %12s  %12s %12s  %s\n", "layer", "rel_l2", "1-cos", "rmse",
                "worst(s,t)", "f64path_rel", "kernel_rel", "");
  s << buf;
  for (const auto& l : layers) {
    char worst[32];
    std::snprintf(worst, sizeof worst, "(%lld,%lld)", static_cast<long long>(l.worst_sequence),
                  static_cast<long long>(o.prefill + l.worst_token));
    std::snprintf(buf, sizeof buf, "%5lld  %10.3e %10.3e %10.3e  %12s  %12.3e %12.3e  %s\n",
                  static_cast<long long>(l.layer), l.converted_vs_original.rel_l2, l.converted_vs_original.cos_diff,
                  l.converted_vs_original.rmse, worst, l.f64_path_vs_original.rel_l2, l.kernel_vs_f64_path.rel_l2,
                  l.pass ? "ok" : "FAIL");
    s << buf;
  }
  std::snprintf(buf, sizeof buf,
                "thresholds: rel_l2 <= %.1e, 1-cos <= %.1e (converted vs original); kernel vs f64 path rel_l2 <= %.1e\n",
                kv_kernel_tolerance(o.kv, o.max_rel_l2, o.kv4_route), kv_cos_tolerance(o.kv, o.max_cos_diff, o.kv4_route),
                kv_kernel_tolerance(o.kv, o.kernel_rel_l2, o.kv4_route));
  s << buf;
  if (perplexity.ran) {
    const PairedComparison& c = perplexity.paired;
    std::snprintf(buf, sizeof buf,
                  "end to end (%s; %lld windows, the same %lld tokens scored on both sides: positions %lld..%lld of "
                  "each window):\n",
                  o.pd_separation ? "PD separation: prefill exact" : "no PD separation: prompt through TPLA too",
                  static_cast<long long>(c.windows), static_cast<long long>(c.tokens),
                  static_cast<long long>(o.prefill + 1), static_cast<long long>(o.prefill + o.decode - 1));
    s << buf;
    std::snprintf(buf, sizeof buf,
                  "  original %.4f bits/byte, converted %.4f; difference %+.5f, %.0f%% CI [%+.5f, %+.5f] (paired t over "
                  "windows; bootstrap [%+.5f, %+.5f]); CI width %.3f%% of the loss; %s\n",
                  c.base_bits, c.test_bits, c.diff_bits, 100 * c.confidence, c.ci_lo, c.ci_hi, c.boot_lo, c.boot_hi,
                  100 * c.relative_width(), c.excludes_zero() ? "the difference is real (CI excludes 0)"
                                                              : "no difference shown (CI contains 0)");
    s << buf;
    std::snprintf(buf, sizeof buf, "  top-1 next-token agreement, original vs converted: %.4f (%lld of %lld)\n",
                  c.top1_agreement(), static_cast<long long>(c.top1_agree), static_cast<long long>(c.tokens));
    s << buf;
    if (o.max_loss_increase.given) {
      std::snprintf(buf, sizeof buf, "  max loss increase %.5f bits/byte: CI upper end %+.5f -> %s\n",
                    o.max_loss_increase.bits(c.base_bits), c.ci_hi, perplexity.loss_pass ? "ok" : "FAIL");
      s << buf;
    }
  }
  if (!devices.empty()) {
    double worst = 0.0;
    for (const auto& l : layers) worst = std::max(worst, l.devices_vs_sequential.rel_l2);
    std::snprintf(buf, sizeof buf,
                  "%s: output vs the one-device decode max rel_l2 %.3e (tolerance %.0e); the table shows "
                  "this run's output\n",
                  devices.c_str(), worst, o.dcp ? o.kernel_rel_l2 : kDevicesRelTolerance);
    s << buf;
  }
  s << (pass ? "PASS\n" : "FAIL\n");
  return s.str();
}

}  // namespace mla::verify
