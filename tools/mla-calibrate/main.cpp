// mla-calibrate: captures (+ the model) -> calib.h5, JSON summary, Markdown report.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "calibration/calibrate.hpp"
#include "io/mla_weights.hpp"
#include "calibration/synthetic.hpp"
#include "common/cli_common.hpp"
#include "io/checkpoint.hpp"
#include "io/fingerprint.hpp"

namespace {
struct Options {
  std::string model, config;
  std::vector<std::string> activations;
  std::string tp = "2,4,8", layers, output = "calib.h5", report;
  mla::calib::CalibrationOptions calib;
  // Synthetic capture generation (tests, throughput measurements).
  std::string synth_out;
  int64_t synth_sequences = 4, synth_seq_len = 64, synth_layers = 1;
  bool synth_hidden = false;
  std::string synth_dtype = "f32";
  double synth_decay = 1.0;
  std::string moment = "auto", io = "auto";
  bool exact_moment = false;
};

std::vector<int64_t> parse_list(const std::string& s, const char* what) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    try { v.push_back(std::stoll(tok)); }
    catch (...) { throw mla::InputError(std::string(what) + ": '" + tok + "' is not an integer"); }
  }
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mla-calibrate: streaming calibration of an MLA checkpoint from captured activations.\n"
               "Every run fits and reports all latent bases: identity, hadamard (or hadamard-block), pca and qk\n"
               "(PCA rotated to keep the content logit where the values are, from the query and key moments;\n"
               "docs/math.md); pick one with mla-convert --reparam."};
  mla::cli::CommonOptions common;
  Options o;
  app.add_option("--model", o.model, "HF checkpoint directory (weights give queries, gamma, fingerprint)");
  app.add_option("--config", o.config, "config.json only (latent captures; gamma taken as 1)");
  app.add_option("--activations", o.activations, "capture HDF5 file(s), merged in order");
  app.add_option("--tp", o.tp, "latent group counts g (comma list), default 2,4,8");
  app.add_option("--layers", o.layers, "layers to calibrate (comma list; default all)");
  app.add_option("-o,--output", o.output, "calib.h5 to write (atomically)");
  app.add_option("--report", o.report, "Markdown report path (+ _fp8.png plot beside it)");
  app.add_option("--hadamard-seed", o.calib.hadamard_seed, "seed of the Hadamard random signs");
  app.add_option("--holdout", o.calib.holdout_fraction, "held-out fraction of sequences (0.1)");
  app.add_flag("--allow-few-tokens", o.calib.allow_few_tokens, "warn instead of refusing below 4*d_c tokens");
  app.add_option("--reservoir-rows", o.calib.reservoir_rows, "rotated rows kept per layer for FP4/Lloyd-Max (128; cost ~linear)");
  app.add_option("--pair-sequences", o.calib.pair_sequences, "sequences per part for mu/FP8 (8)");
  app.add_option("--queries", o.calib.queries_per_sequence, "query positions per such sequence (8)");
  app.add_option("--threads", o.calib.threads, "layers calibrated in parallel (0: all cores); output does not depend on it");
  app.add_option("--moment", o.moment,
                 "second-moment arithmetic: auto (default: bf16 with AVX-512 BF16 and >= 262144 fitting tokens, "
                 "else f32), bf16 (bfloat16 products, float32 block sums, float64 total: ~2x f32), f32 (float32 "
                 "ssyrk blocks), f64 (float64 dsyrk, exact)")
      ->check(CLI::IsMember({"auto", "bf16", "f32", "f64"}));
  app.add_flag("--exact-moment", o.exact_moment, "same as --moment f64");
  app.add_option("--io", o.io,
                 "how pass 1 reads the capture: auto (direct when the file is larger than half the RAM), direct "
                 "(O_DIRECT), buffered (page cache), hdf5 (H5Dread)")
      ->check(CLI::IsMember({"auto", "direct", "buffered", "hdf5"}));
  app.add_option("--prefetch", o.calib.prefetch_depth, "sequences read ahead per layer worker (4)");
  app.add_flag("--mu-per-head", o.calib.mu_per_head, "also fit mu per head");
  app.add_option("--protect-first", o.calib.protect_first, "first n layers kept BF16 (1)");
  app.add_option("--protect-last", o.calib.protect_last, "last n layers kept BF16 (1)");
  app.add_option("--protect-worst", o.calib.protect_worst_fraction, "fraction of worst FP4-MSE layers kept BF16 (0.1)");
  app.add_option("--make-synthetic-capture", o.synth_out, "write a synthetic capture for --config/--model and exit");
  app.add_option("--synthetic-sequences", o.synth_sequences, "--make-synthetic-capture: sequences (4)");
  app.add_option("--synthetic-seq-len", o.synth_seq_len, "--make-synthetic-capture: tokens per sequence (64)");
  app.add_option("--synthetic-layers", o.synth_layers, "--make-synthetic-capture: layers (1)");
  app.add_flag("--synthetic-hidden", o.synth_hidden, "--make-synthetic-capture: the capture holds h instead of latent");
  app.add_option("--capture-dtype", o.synth_dtype, "--make-synthetic-capture: element type, f32 (default) or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--synthetic-channel-decay", o.synth_decay,
                 "--make-synthetic-capture: latent channel i gets standard deviation r^i (default 1: isotropic; "
                 "PCA of isotropic data is ill-conditioned, a decaying spectrum is closer to real latents)");
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&]() {
    // Options of the other mode are refused, so that no setting is silently ignored:
    // --make-synthetic-capture writes the capture and exits before calibrating.
    const auto given = [&](const char* name) { return app.count(name) > 0; };
    if (!o.synth_out.empty()) {
      for (const char* opt : {"--activations", "--tp", "--layers", "--output", "--report", "--hadamard-seed",
                              "--holdout", "--allow-few-tokens", "--reservoir-rows", "--pair-sequences", "--queries",
                              "--threads", "--moment", "--exact-moment", "--io", "--prefetch", "--mu-per-head",
                              "--protect-first", "--protect-last", "--protect-worst", "--json"})
        if (given(opt))
          throw mla::InputError(std::string(opt) + " is read when calibrating only, not with --make-synthetic-capture");
    }
    mla::cli::require_with(app, !o.synth_out.empty(),
                           {"--synthetic-sequences", "--synthetic-seq-len", "--synthetic-layers", "--synthetic-hidden",
                            "--capture-dtype", "--synthetic-channel-decay"},
                           "--make-synthetic-capture");
    if (o.exact_moment && given("--moment") && o.moment != "f64")
      throw mla::InputError("--exact-moment is --moment f64; it cannot be given with --moment " + o.moment);
    if (o.model.empty() == o.config.empty())
      throw mla::InputError("give exactly one of --model CHECKPOINT or --config config.json");
    std::optional<mla::io::Checkpoint> ckpt;
    mla::model::MlaConfig cfg;
    std::string fp;
    if (!o.model.empty()) {
      ckpt.emplace(mla::io::Checkpoint::open(o.model));
      cfg = ckpt->config();
      fp = mla::io::fingerprint(*ckpt);
    } else {
      cfg = mla::model::load_mla_config(o.config);
      fp = mla::io::fingerprint_config_text(cfg);
    }
    if (!o.synth_out.empty()) {
      mla::calib::SyntheticCaptureSpec spec;
      spec.sequences = o.synth_sequences; spec.seq_len = o.synth_seq_len;
      spec.num_layers = o.synth_layers; spec.latent = !o.synth_hidden;
      spec.dtype = o.synth_dtype == "bf16" ? mla::io::StoredType::BF16 : mla::io::StoredType::F32;
      if (o.synth_decay != 1.0)
        for (int64_t i = 0; i < cfg.kv_lora_rank; ++i) spec.channel_scale.push_back(std::pow(o.synth_decay, static_cast<double>(i)));
      mla::calib::write_synthetic_capture(o.synth_out, cfg, spec);
      return 0;
    }
    o.calib.captures = o.activations;
    o.calib.moment = o.exact_moment || o.moment == "f64" ? mla::calib::MomentMode::F64
                     : o.moment == "f32"                 ? mla::calib::MomentMode::F32
                     : o.moment == "bf16"                ? mla::calib::MomentMode::BF16
                                                         : mla::calib::MomentMode::Auto;
    o.calib.io = o.io == "direct"     ? mla::io::IoMode::Direct
                 : o.io == "buffered" ? mla::io::IoMode::Buffered
                 : o.io == "hdf5"     ? mla::io::IoMode::Hdf5
                                      : mla::io::IoMode::Auto;
    o.calib.groups.clear();
    for (int64_t g : parse_list(o.tp, "--tp")) o.calib.groups.push_back(static_cast<int>(g));
    if (!o.layers.empty()) o.calib.layers = parse_list(o.layers, "--layers");
    mla::calib::WeightsProvider weights = [&](int64_t layer) {
      if (ckpt) return mla::io::load_attention_weights(*ckpt, layer);
      mla::model::AttentionWeights w;  // latent-only path: gamma = 1, no projections
      w.kv_a_layernorm = mla::VectorD::Ones(cfg.kv_lora_rank);
      w.kv_b_proj = mla::MatrixR::Zero(cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank);
      return w;
    };
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = mla::calib::calibrate(cfg, weights, fp, o.calib);
    mla::calib::write_calib_h5(res, o.output);
    if (!o.report.empty()) mla::calib::write_report(res, o.report);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t tokens = 0;
    for (const auto& L : res.layers) tokens += L.tokens_fit + L.tokens_holdout;
    spdlog::info("calibrated {} layers, {} layer-tokens in {:.2f} s ({:.0f} layer-tokens/s) -> {}",
                 res.layers.size(), tokens, secs, tokens / secs, o.output);
    if (!common.json_path.empty()) mla::cli::write_json_output(common.json_path, mla::calib::calib_summary_json(res));
    return 0;
  });
}
