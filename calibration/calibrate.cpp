#include "calibration/calibrate.hpp"

#include <cblas.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "calibration/layer_calibrator.hpp"
#include "calibration/qk_basis.hpp"
#include "core/error.hpp"
#include "io/capture.hpp"
#include "quant/fp8_kv.hpp"
#include "model/rmsnorm.hpp"
#include "model/rope.hpp"
#include "quant/hadamard.hpp"

namespace mla::calib {

namespace {

// Layers kept in BF16 by the FP4 study: the first and last ones and the worst fraction by
// held-out FP4 error; each gets its reason.
void mark_protected_layers(CalibrationResult& res, const CalibrationOptions& opt, int64_t nl) {
  std::vector<std::size_t> order(res.layers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return res.layers[a].fp4_holdout_rel_mse > res.layers[b].fp4_holdout_rel_mse;
  });
  const auto n_worst = static_cast<std::size_t>(std::ceil(opt.protect_worst_fraction * order.size()));
  for (std::size_t i = 0; i < order.size(); ++i) {
    auto& L = res.layers[order[i]];
    std::vector<std::string> why;
    if (L.layer < opt.protect_first) why.push_back("first " + std::to_string(opt.protect_first));
    if (L.layer >= nl - opt.protect_last) why.push_back("last " + std::to_string(opt.protect_last));
    if (i < n_worst) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "worst %.0f%% FP4 held-out relative MSE (%.4g)",
                    100 * opt.protect_worst_fraction, L.fp4_holdout_rel_mse);
      why.push_back(buf);
    }
    L.protect = !why.empty();
    for (std::size_t k = 0; k < why.size(); ++k) L.protect_reason += (k ? "; " : "") + why[k];
  }
}

// The global FP4 constant and codebook from the first rows of every layer's reservoir, and the
// analytic Lloyd-Max references.
void fit_global_quantisers(CalibrationResult& res, int64_t dc) {
  std::vector<float> pooled;
  const std::size_t per_layer = static_cast<std::size_t>(std::max<int64_t>(1, 4096 / std::max<std::size_t>(1, res.layers.size()))) * dc;
  for (auto& L : res.layers) {
    const std::size_t n = std::min(per_layer, L.sample.size()) / quant::kFp4Group * quant::kFp4Group;
    pooled.insert(pooled.end(), L.sample.begin(), L.sample.begin() + static_cast<std::ptrdiff_t>(n));
    L.sample.clear();
    L.sample.shrink_to_fit();
  }
  if (!pooled.empty()) {
    res.global_fp4 = fit_fp4_constant(pooled);
    res.global_codebook = quant::lloyd_max_samples(std::vector<double>(pooled.begin(), pooled.end()));
  }
  res.analytic_gaussian_unit = quant::lloyd_max_gaussian(1.0);
  res.analytic_gaussian_1_over_d = quant::lloyd_max_gaussian(1.0 / std::sqrt(static_cast<double>(dc)));
  res.analytic_sphere = quant::lloyd_max_sphere_coordinate(static_cast<int>(dc));
}

// Opens and checks every capture (against the model, and its fingerprint against the model's),
// records their provenance in `res` and the held-out count of each in `n_hold`. Returns the
// fitting tokens; fewer than 4 d_c are refused (or only warned with allow_few_tokens).
int64_t open_captures(const model::MlaConfig& cfg, const std::string& fingerprint, const CalibrationOptions& opt,
                      CalibrationResult& res, std::vector<std::unique_ptr<io::CaptureReader>>& caps,
                      std::vector<int64_t>& n_hold) {
  const int64_t dc = cfg.kv_lora_rank;
  int64_t fit_tokens = 0;
  for (const auto& p : opt.captures) {
    caps.push_back(std::make_unique<io::CaptureReader>(p, cfg));
    caps.back()->set_io_mode(opt.io);
    const auto& ci = caps.back()->info();
    if (!ci.checkpoint_fingerprint.empty() && !fingerprint.empty() &&
        ci.checkpoint_fingerprint != fingerprint) {
      throw InputError("capture " + p + ": attribute checkpoint_fingerprint " +
                       ci.checkpoint_fingerprint + " does not match the model's " + fingerprint);
    }
    res.capture_sources.push_back(ci.source.empty() ? p : ci.source);
    res.corpus_sha256.push_back(ci.corpus_sha256);
    const int64_t nh = ci.sequences >= 2
        ? std::max<int64_t>(1, std::llround(opt.holdout_fraction * static_cast<double>(ci.sequences)))
        : 0;
    if (nh == 0) res.warnings.push_back("capture " + p + " has one sequence: nothing held out, "
                                        "slicing errors are measured on the fitting data");
    n_hold.push_back(nh);
    fit_tokens += (ci.sequences - nh) * ci.seq_len;
  }
  if (fit_tokens < 4 * dc) {
    const std::string msg = "only " + std::to_string(fit_tokens) + " fitting tokens, fewer than 4 x d_c = " +
                            std::to_string(4 * dc) + ": a PCA basis would fit noise (SPEC section 3)";
    if (!opt.allow_few_tokens) throw InputError("mla-calibrate: " + msg);
    res.warnings.push_back(msg);
    spdlog::warn("{}", msg);
  }
  return fit_tokens;
}

// The second-moment arithmetic: Auto resolved once, from the capture size and the CPU; its
// description goes into `res`.
MomentMode resolve_moment_mode(MomentMode requested, int64_t fit_tokens, CalibrationResult& res) {
  MomentMode moment = requested;
  if (moment == MomentMode::Auto)
    moment = SecondMoment::bf16_kernel_available() && fit_tokens >= kAutoBf16Tokens ? MomentMode::BF16 : MomentMode::F32;
  switch (moment) {
    case MomentMode::F64: res.second_moment_accumulation = "float64 dsyrk"; break;
    case MomentMode::F32:
      res.second_moment_accumulation = "float32 ssyrk blocks of " + std::to_string(SecondMoment::kFloatBlock) +
                                       " rows, summed in float64";
      break;
    case MomentMode::BF16:
      res.second_moment_accumulation =
          "bfloat16 products c x bf16(c / rms(c)^2) (c rounded to bfloat16 first), float32 sums over blocks of " +
          std::to_string(SecondMoment::kFloatBlock) + " rows, summed in float64";
      if (!SecondMoment::bf16_kernel_available())
        spdlog::warn("this CPU has no AVX-512 BF16: the bf16 second moment runs through float32 sgemm "
                     "(same result to float32 rounding, ~4x slower than with avx512_bf16; --moment f32 is faster here)");
      break;
    default: break;
  }
  return moment;
}

}  // namespace

const char* moment_mode_name(MomentMode m) {
  switch (m) {
    case MomentMode::Auto: return "auto";
    case MomentMode::BF16: return "bf16";
    case MomentMode::F32: return "f32";
    default: return "f64";
  }
}

std::vector<std::string> calibrated_bases(int64_t d_c) {
  std::vector<std::string> v = basis_names();
  if (!quant::is_power_of_two(static_cast<std::size_t>(d_c)))
    for (auto& b : v)
      if (b == "hadamard") b = "hadamard-block";
  return v;
}

std::string hadamard_unavailable_reason(int64_t d_c) {
  if (quant::is_power_of_two(static_cast<std::size_t>(d_c))) return "";
  std::string blocks;
  for (std::size_t b : quant::hadamard_blocks(static_cast<std::size_t>(d_c)))
    blocks += (blocks.empty() ? "" : " + ") + std::to_string(b);
  return "hadamard basis unavailable: kv_lora_rank d_c = " + std::to_string(d_c) +
         " is not a power of two (Sylvester Hadamard matrices exist only for 2^k); calibrated "
         "'hadamard-block' instead (block-diagonal Hadamard over " + blocks + ", usable with mla-convert "
         "--reparam hadamard-block)";
}

CalibrationResult calibrate(const model::MlaConfig& cfg, const WeightsProvider& weights,
                            const std::string& fingerprint, const CalibrationOptions& opt) {
  const int64_t dc = cfg.kv_lora_rank, H = cfg.num_heads;
  if (opt.captures.empty()) throw InputError("mla-calibrate: no capture given (--activations)");
  if (opt.groups.empty()) throw InputError("mla-calibrate: no latent group count given");
  const int gmax = *std::max_element(opt.groups.begin(), opt.groups.end());
  for (int g : opt.groups) {
    if (g < 1 || gmax % g != 0 || dc % gmax != 0) {
      throw InputError("mla-calibrate: group count g = " + std::to_string(g) +
                       " must be >= 1, divide the largest g (" + std::to_string(gmax) +
                       ") and d_c = " + std::to_string(dc) + " must be divisible by " +
                       std::to_string(gmax));
    }
  }
  if (!(opt.holdout_fraction > 0.0 && opt.holdout_fraction < 1.0)) {
    throw InputError("mla-calibrate: holdout fraction must be in (0, 1), got " +
                     std::to_string(opt.holdout_fraction));
  }

  std::vector<std::unique_ptr<io::CaptureReader>> caps;
  CalibrationResult res;
  res.checkpoint_fingerprint = fingerprint;
  res.model_type = cfg.model_type;
  res.d_c = dc;
  res.num_heads = H;
  res.hadamard_seed = opt.hadamard_seed;
  // Sylvester's Hadamard exists only for d_c = 2^k: elsewhere everything else is calibrated
  // and the block-diagonal Hadamard takes its place (also for the FP4 / Lloyd-Max rows).
  const std::vector<std::string> run_bases = calibrated_bases(dc);
  res.hadamard_unavailable = hadamard_unavailable_reason(dc);
  res.mixing_basis = res.hadamard_unavailable.empty() ? "hadamard" : "hadamard-block";
  const std::string mix = res.mixing_basis;
  if (!res.hadamard_unavailable.empty()) {
    res.warnings.push_back(res.hadamard_unavailable);
    spdlog::warn("{}", res.hadamard_unavailable);
  }
  res.holdout_fraction = opt.holdout_fraction;
  res.groups = opt.groups;
  std::vector<int64_t> n_hold;  // held-out sequences per capture (the last ones)
  const int64_t fit_tokens = open_captures(cfg, fingerprint, opt, res, caps, n_hold);
  const MomentMode moment = resolve_moment_mode(opt.moment, fit_tokens, res);
  std::vector<int64_t> layers = opt.layers;
  const int64_t nl = caps[0]->info().num_layers;
  if (layers.empty()) for (int64_t l = 0; l < nl; ++l) layers.push_back(l);
  for (int64_t l : layers) {
    if (l < 0 || l >= nl) {
      throw InputError("mla-calibrate: layer " + std::to_string(l) + " is out of range [0, " +
                       std::to_string(nl) + ")");
    }
  }

  const std::vector<double> signs = quant::random_signs(dc, opt.hadamard_seed);
  std::map<std::string, Eigen::MatrixXd> fixed_bases;
  fixed_bases["identity"] = Eigen::MatrixXd::Identity(dc, dc);
  fixed_bases[mix] = quant::block_hadamard_basis(dc, opt.hadamard_seed);  // = hadamard_basis at 2^k
  const double scale = cfg.softmax_scale();
  // Pass-2 sequences of capture ci, (index, held-out): a budget per capture spread evenly over
  // the held-out part, and for captures holding h as many fit sequences (query pairs for mu).
  const int64_t budget = std::max<int64_t>(1, opt.pair_sequences / static_cast<int64_t>(caps.size()));
  auto pass2_picks = [&](std::size_t ci) {
    const auto& info = caps[ci]->info();
    const int64_t nfit = info.sequences - n_hold[ci];
    std::vector<std::pair<int64_t, bool>> picks;
    // Fit sequences serve only the (query, key) pairs: a latent capture has none.
    if (info.has_hidden) for (int64_t s : spread(nfit, budget)) picks.push_back({s, false});
    for (int64_t s : spread(n_hold[ci], budget)) picks.push_back({nfit + s, true});
    if (n_hold[ci] == 0) for (int64_t s : spread(nfit, budget)) picks.push_back({s, true});
    return picks;
  };
  std::mutex weights_mutex;  // the provider (checkpoint reader) is not assumed thread-safe

  const CalibrationContext cx{cfg, opt, caps, n_hold, moment, run_bases, mix, signs, fixed_bases, gmax, scale, pass2_picks};
  auto run_layer = [&](int64_t layer, std::vector<std::string>& warnings) {
    model::AttentionWeights w;
    {
      std::lock_guard<std::mutex> lock(weights_mutex);
      w = weights(layer);
    }
    if (std::any_of(caps.begin(), caps.end(), [](const auto& c) { return c->info().has_hidden; }) &&
        (w.kv_a_proj_with_mqa.rows() != dc + cfg.qk_rope_head_dim || w.kv_a_proj_with_mqa.cols() != cfg.hidden_size)) {
      throw InputError("mla-calibrate: layer " + std::to_string(layer) + ": a capture holding the attention input h "
                       "needs the layer's kv_a_proj_with_mqa [" + std::to_string(dc + cfg.qk_rope_head_dim) + ", " +
                       std::to_string(cfg.hidden_size) + "] (give --model, not --config)");
    }
    return calibrate_layer(cx, layer, std::move(w), warnings);
  };

  // Layers on worker threads; results land in layer order, so the output does not depend on
  // the thread count (tested). A single layer uses one core.
  int64_t n_threads = opt.threads > 0 ? opt.threads
                                      : static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads = std::min<int64_t>(n_threads, static_cast<int64_t>(layers.size()));
  std::vector<LayerCalibration> done(layers.size());
  std::vector<std::vector<std::string>> layer_warnings(layers.size());
  std::vector<std::exception_ptr> errors(layers.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&]() {
    for (std::size_t i; !failed && (i = next++) < layers.size();) {
      try {
        done[i] = run_layer(layers[i], layer_warnings[i]);
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  // One BLAS thread per layer, always: LAPACK's dsyevd (PCA) rounds differently with 1 and 2
  // BLAS threads, so a thread-count-dependent BLAS would make the output depend on --threads.
  struct BlasThreads {
    int saved = openblas_get_num_threads();
    BlasThreads() { openblas_set_num_threads(1); }
    ~BlasThreads() { openblas_set_num_threads(saved); }
  } blas_one_thread;
  if (n_threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int64_t k = 0; k < n_threads; ++k) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    res.layers.push_back(std::move(done[i]));
    for (auto& m : layer_warnings[i]) res.warnings.push_back(std::move(m));
  }

  mark_protected_layers(res, opt, nl);
  fit_global_quantisers(res, dc);
  return res;
}

}  // namespace mla::calib
