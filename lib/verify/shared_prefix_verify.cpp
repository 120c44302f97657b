#include "verify/shared_prefix_verify.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/capture.hpp"
#include "io/checkpoint.hpp"
#include "io/converted_checkpoint.hpp"
#include "io/mla_weights.hpp"
#include "model/attention_reference.hpp"
#include "verify/shared_prefix_backend.hpp"

namespace mla::verify {
namespace fs = std::filesystem;
using model::MlaConfig;

namespace {

int converted_ranks(const fs::path& converted) {
  const fs::path manifest = converted / "manifest.json";
  std::ifstream in(manifest);
  if (!in) throw InputError(manifest.string() + ": cannot open (not an mla-convert output?)");
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

std::vector<MatrixR> read_inputs(const io::CaptureReader& cap, const VerifyOptions& o, int64_t layer, int64_t n_tok) {
  const io::CaptureGroupInfo gi = cap.group_info(o.capture_group);
  const int64_t D = cap.meta().hidden_size;
  const std::string file = o.activations.string();
  if (gi.sequences < o.sequences)
    throw InputError(file + ": /" + o.capture_group + " has " + std::to_string(gi.sequences) +
                     " sequences, --sequences asks " + std::to_string(o.sequences));
  if (gi.seq_len < n_tok)
    throw InputError(file + ": /" + o.capture_group + " sequences have " + std::to_string(gi.seq_len) +
                     " tokens, --prefill + --decode need " + std::to_string(n_tok));
  std::vector<MatrixR> out;
  for (int64_t s = 0; s < o.sequences; ++s) {
    const std::vector<float> row = cap.hidden(o.capture_group, layer, s);
    MatrixR m = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                    row.data(), gi.seq_len, D).topRows(n_tok).cast<double>();
    if (!m.allFinite())
      throw InputError(file + ": /" + o.capture_group + "/" + io::capture_layer_path(layer, "hidden") + " sequence " +
                       std::to_string(s) + " has NaN/Inf");
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<double> flatten(const std::vector<MatrixR>& ms) {
  std::vector<double> v;
  for (const auto& m : ms) v.insert(v.end(), m.data(), m.data() + m.size());
  return v;
}

// The mixed path and the float64 converted path of one layer; out[b] is [T, D].
void run_layer(const io::RankAttention& r, const std::vector<MatrixR>& h, int64_t N, int64_t P, int64_t T,
               const VerifyOptions& o, std::vector<MatrixR>& mixed, std::vector<MatrixR>& f64) {
  const MlaConfig& cfg = r.config;
  const auto& w = r.weights;
  const int B = static_cast<int>(h.size());
  const int H = static_cast<int>(cfg.num_heads), d_c = static_cast<int>(cfg.kv_lora_rank);
  const int d_r = static_cast<int>(cfg.qk_rope_head_dim), d_n = static_cast<int>(cfg.qk_nope_head_dim);
  const int d_v = static_cast<int>(cfg.v_head_dim), dim = d_c + d_r, ps = o.page_size;
  const int64_t n_tok = P + T, D = cfg.hidden_size;
  std::vector<model::LatentCache> lat(B);
  std::vector<MatrixR> q_nope(B), q_pe(B), q_lat(B);
  for (int b = 0; b < B; ++b) {
    lat[b] = model::compute_latent(cfg, w, h[b], 0);
    model::QueryParts q = model::project_queries(cfg, w, h[b], 0);
    q_lat[b] = model::absorb_queries(cfg, w, q.q_nope);
    q_nope[b] = std::move(q.q_nope);
    q_pe[b] = std::move(q.q_pe);
  }

  SharedPrefixStep s;
  s.batch = B;
  s.heads = H;
  s.d_c = d_c;
  s.d_r = d_r;
  s.d_n = d_n;
  s.d_v = d_v;
  s.page_size = ps;
  s.prefix_len = static_cast<int>(N);
  s.prefix_pages = static_cast<int>((N + ps - 1) / ps);
  const int own_pages = static_cast<int>((n_tok - N + ps - 1) / ps);
  s.own_max_pages = own_pages + 1;
  s.num_pages = s.prefix_pages + B * own_pages + 2;  // two never-used (NaN) pages
  s.scale = static_cast<float>(cfg.softmax_scale());
  std::vector<int32_t> perm(s.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(o.seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  s.cache.assign(static_cast<size_t>(s.num_pages) * ps * dim, 0x7FC0);
  auto put = [&](int page, int slot, int b, int64_t t) {
    uint16_t* row = s.cache.data() + (static_cast<size_t>(page) * ps + slot) * dim;
    for (int i = 0; i < d_c; ++i) row[i] = double_to_bf16(lat[b].x(t, i));
    for (int i = 0; i < d_r; ++i) row[d_c + i] = double_to_bf16(lat[b].k_pe(t, i));
  };
  int next = 0;
  s.prefix_table.resize(s.prefix_pages);
  for (auto& p : s.prefix_table) p = perm[next++];
  for (int64_t t = 0; t < N; ++t) put(s.prefix_table[t / ps], static_cast<int>(t % ps), 0, t);
  s.own_table.assign(static_cast<size_t>(B) * s.own_max_pages, 1 << 30);
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < own_pages; ++i) s.own_table[static_cast<size_t>(b) * s.own_max_pages + i] = perm[next++];
    for (int64_t t = N; t < n_tok; ++t)
      put(s.own_table[static_cast<size_t>(b) * s.own_max_pages + (t - N) / ps], static_cast<int>((t - N) % ps), b, t);
  }
  s.kv_b.resize(static_cast<size_t>(w.kv_b_proj.size()));
  for (int64_t i = 0; i < w.kv_b_proj.rows(); ++i)
    for (int64_t c = 0; c < w.kv_b_proj.cols(); ++c) s.kv_b[i * d_c + c] = double_to_bf16(w.kv_b_proj(i, c));
  shared_prefix_decompress(s, o.device);

  mixed.assign(B, MatrixR::Zero(T, D));
  f64.assign(B, MatrixR::Zero(T, D));
  s.q_naive.resize(static_cast<size_t>(B) * H * (d_n + d_r));
  s.q_abs.resize(static_cast<size_t>(B) * H * dim);
  s.own_len.resize(B);
  for (int64_t t = P; t < n_tok; ++t) {
    for (int b = 0; b < B; ++b) {
      s.own_len[b] = static_cast<int32_t>(t - N + 1);
      for (int hh = 0; hh < H; ++hh) {
        uint16_t* qn = s.q_naive.data() + (static_cast<size_t>(b) * H + hh) * (d_n + d_r);
        uint16_t* qa = s.q_abs.data() + (static_cast<size_t>(b) * H + hh) * dim;
        for (int i = 0; i < d_n; ++i) qn[i] = double_to_bf16(q_nope[b](t, hh * d_n + i));
        for (int i = 0; i < d_r; ++i) qn[d_n + i] = qa[d_c + i] = double_to_bf16(q_pe[b](t, hh * d_r + i));
        for (int i = 0; i < d_c; ++i) qa[i] = double_to_bf16(q_lat[b](t, hh * d_c + i));
      }
    }
    shared_prefix_decode(s, o.device);
    for (int b = 0; b < B; ++b) {
      MatrixR o_row(1, H * d_v);
      for (int i = 0; i < H * d_v; ++i) o_row(0, i) = bf16_to_float(s.out[static_cast<size_t>(b) * H * d_v + i]);
      mixed[b].row(t - P) = o_row * w.o_proj.transpose();
      // Float64: absorbed form over tokens 0..t of this sequence.
      model::LatentCache c;
      c.x = lat[b].x.topRows(t + 1);
      c.k_pe = lat[b].k_pe.topRows(t + 1);
      const MatrixR ql = Eigen::Map<const MatrixR>(q_lat[b].row(t).data(), H, d_c);
      const MatrixR qp = Eigen::Map<const MatrixR>(q_pe[b].row(t).data(), H, d_r);
      const model::DecodeCoreResult core = model::absorbed_decode_core(ql, qp, c, cfg.softmax_scale());
      const MatrixR o_lat = Eigen::Map<const MatrixR>(core.o_lat.data(), 1, H * d_c);
      f64[b].row(t - P) = model::expand_latent_output(cfg, w, o_lat) * w.o_proj.transpose();
    }
  }
}

}  // namespace

SharedPrefixReport verify_shared_prefix(const VerifyOptions& o, int64_t N) {
  if (o.prefill < 1 || o.decode < 1) throw InputError("--shared-prefix needs --prefill >= 1 and --decode >= 1");
  if (N < 1 || N > o.prefill)
    throw InputError("--shared-prefix = " + std::to_string(N) + " must be in [1, --prefill = " +
                     std::to_string(o.prefill) + "] (the shared prefix is part of the prompt)");
  if (o.sequences < 1) throw InputError("--sequences must be >= 1");
  // What the mixed path does not run: refused rather than ignored, so a report never claims a
  // cache format, device split or end-to-end figure it did not measure.
  if (o.kv != "bf16")
    throw InputError("--shared-prefix decodes a bf16 cache (the prefix kernels read BF16 pages); got --kv " + o.kv);
  if (!o.calib.empty() || o.kv4_route != "bf16")
    throw InputError("--shared-prefix decodes a bf16 cache: --calib and --kv4-route are read with --kv fp4 or "
                     "codebook only");
  if (o.devices > 0 || o.dcp)
    throw InputError("--shared-prefix runs on one device; --devices " + std::to_string(o.devices) +
                     (o.dcp ? " --dcp" : "") + " is not supported with it");
  if (o.perplexity) throw InputError("--shared-prefix reports per-layer errors only; run --perplexity without it");
  if (!o.pd_separation)
    throw InputError("--shared-prefix prefills the prompt exactly; --no-pd-separation is not supported with it");
  if (o.page_size != 64 && o.page_size != 128)
    throw InputError("--page-size must be 64 or 128, got " + std::to_string(o.page_size));
  if (o.device != "cpu" && o.device != "cuda") throw InputError("--device must be cpu or cuda, got '" + o.device + "'");
  if (!o.skip_manifest_check) io::check_manifest(o.converted, o.original);
  const int tp = converted_ranks(o.converted);
  if (tp != 1)
    throw InputError(o.converted.string() + ": --shared-prefix verifies a tp = 1 conversion; this one has " +
                     std::to_string(tp) + " ranks");
  const io::Checkpoint orig = io::Checkpoint::open(o.original);
  const MlaConfig& cfg = orig.config();
  std::vector<int64_t> layers = o.layers;
  if (layers.empty())
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) layers.push_back(i);
  for (int64_t l : layers)
    if (l < 0 || l >= cfg.attention_layers())
      throw InputError("--layers: layer " + std::to_string(l) + " out of range [0, " +
                       std::to_string(cfg.attention_layers()) + ")");
  const io::CaptureReader cap(o.activations);
  if (cap.meta().hidden_size != cfg.hidden_size)
    throw InputError(o.activations.string() + ": capture has hidden_size " + std::to_string(cap.meta().hidden_size) +
                     "; " + o.original.string() + " has " + std::to_string(cfg.hidden_size));
  if (!cap.has_group(o.capture_group))
    throw InputError(o.activations.string() + ": capture has no group '/" + o.capture_group + "'");

  SharedPrefixReport rep;
  rep.backend = o.device == "cuda" ? "cuda (mixed: naive prefix kernel + absorbed kernel + merge)"
                                   : "cpu (CPU twins of the mixed path)";
  rep.shared_prefix = N;
  rep.pass = true;
  const int64_t n_tok = o.prefill + o.decode;
  for (int64_t layer : layers) {
    std::vector<MatrixR> h = read_inputs(cap, o, layer, n_tok);
    for (size_t b = 1; b < h.size(); ++b) h[b].topRows(N) = h[0].topRows(N);  // the shared prefix
    const model::AttentionWeights original = io::load_attention_weights(orig, layer);
    const io::RankAttention r = io::load_rank_attention(o.converted / io::rank_dir_name(0, 1), layer);
    std::vector<MatrixR> ref;
    for (const auto& hb : h) ref.push_back(model::attention_naive(cfg, original, hb, 0).bottomRows(o.decode));
    std::vector<MatrixR> mixed, f64;
    run_layer(r, h, N, o.prefill, o.decode, o, mixed, f64);
    SharedPrefixLayerReport lr;
    lr.layer = layer;
    lr.mixed_vs_original = model::compare(flatten(mixed), flatten(ref));
    lr.f64_vs_original = model::compare(flatten(f64), flatten(ref));
    lr.mixed_vs_f64 = model::compare(flatten(mixed), flatten(f64));
    lr.pass = lr.mixed_vs_original.nonfinite_match && lr.mixed_vs_original.rel_l2 <= o.max_rel_l2 &&
              lr.mixed_vs_original.cos_diff <= o.max_cos_diff && lr.mixed_vs_f64.rel_l2 <= o.kernel_rel_l2;
    rep.pass = rep.pass && lr.pass;
    spdlog::info("layer {}: shared prefix {} of {} prompt tokens: mixed vs original rel_l2 {:.3e}, kernel vs f64 {:.3e}",
                 layer, N, o.prefill, lr.mixed_vs_original.rel_l2, lr.mixed_vs_f64.rel_l2);
    rep.layers.push_back(lr);
  }
  return rep;
}

nlohmann::json SharedPrefixReport::to_json(const VerifyOptions& o) const {
  auto m = [](const model::ErrorMetrics& e) {
    return nlohmann::json{{"rel_l2", e.rel_l2}, {"cos_diff", e.cos_diff}, {"rmse", e.rmse}, {"max_abs", e.max_abs},
                          {"nonfinite_match", e.nonfinite_match}};
  };
  nlohmann::json j;
  j["mode"] = "shared-prefix";
  j["backend"] = backend;
  j["shared_prefix"] = shared_prefix;
  j["prefill"] = o.prefill;
  j["decode"] = o.decode;
  j["sequences"] = o.sequences;
  j["thresholds"] = {{"max_rel_l2", o.max_rel_l2}, {"max_cos_diff", o.max_cos_diff}, {"kernel_rel_l2", o.kernel_rel_l2}};
  for (const auto& l : layers)
    j["layers"].push_back({{"layer", l.layer}, {"mixed_vs_original", m(l.mixed_vs_original)},
                           {"f64_path_vs_original", m(l.f64_vs_original)}, {"kernel_vs_f64_path", m(l.mixed_vs_f64)},
                           {"pass", l.pass}});
  j["pass"] = pass;
  return j;
}

std::string SharedPrefixReport::table(const VerifyOptions& o) const {
  std::ostringstream s;
  char buf[256];
  s << "verify-decode --shared-prefix " << shared_prefix << ": " << backend << "; " << o.sequences
    << " sequences sharing their first " << shared_prefix << " tokens, prefill " << o.prefill << " + decode "
    << o.decode << "\n";
  s << "layer  mixed-vs-original rel_l2   1-cos      | f64-path-vs-original rel_l2 | kernel-vs-f64 rel_l2 | pass\n";
  for (const auto& l : layers) {
    std::snprintf(buf, sizeof buf, "%5lld  %24.3e %10.3e | %27.3e | %20.3e | %s\n", static_cast<long long>(l.layer),
                  l.mixed_vs_original.rel_l2, l.mixed_vs_original.cos_diff, l.f64_vs_original.rel_l2,
                  l.mixed_vs_f64.rel_l2, l.pass ? "yes" : "NO");
    s << buf;
  }
  s << (pass ? "PASS" : "FAIL") << " (thresholds: rel_l2 <= " << o.max_rel_l2 << ", 1-cos <= " << o.max_cos_diff
    << ", kernel rel_l2 <= " << o.kernel_rel_l2 << ")\n";
  return s.str();
}

}  // namespace mla::verify
