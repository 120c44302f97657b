#pragma once
// verify-decode: runs a converted (TPLA) checkpoint's attention through the decode kernels
// (or their CPU twins) and compares every decoded token with the ORIGINAL model computed in
// float64 (model/attention_reference.hpp), layer by layer; optionally end to end (perplexity
// of the tiny dense models, prefill exact, decode TPLA).
//
// Per layer, for `sequences` captured sequences of P + T tokens (capture schema:
// docs/formats/capture.md, group /eval by default):
//   original:  attention_naive(original weights) on all P + T tokens, rows P.. compared;
//   converted: PD separation (SPEC 2 step 4) — the P prompt tokens' cache rows are the exact
//              global x = c / rms(c) (rotated latent, gamma absorbed), sliced per group; then
//              T tokens are decoded one at a time: each rank computes its own c_k, normalises
//              it (approx: its kv_a_layernorm holds sqrt(g f_k); exact: the all-reduced rms),
//              appends [x_k | k_pe] to its paged bf16 cache (cache-append kernel), decodes its
//              heads on its slice (decode kernel), expands with W_UV and applies its o_proj
//              columns; the partial outputs are summed over ranks (the all-reduce).
//   The same converted path is also computed in float64 (no bf16 cache, no kernel) so the
//   report separates the conversion's own error (f64 path vs original) from the kernel's
//   (kernel path vs f64 path).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/metrics.hpp"
#include "verify/paired_stats.hpp"

namespace mla::verify {

struct VerifyOptions {
  std::filesystem::path original;
  std::filesystem::path converted;
  std::filesystem::path activations;
  std::string capture_group = "eval";
  int64_t prefill = 64;            // P
  int64_t decode = 16;             // T
  int64_t sequences = 4;           // batch of captured sequences
  std::vector<int64_t> layers;     // empty: every layer
  std::string device = "cpu";      // cpu | cuda
  bool kernel = true;              // false: per-layer figures from the float64 converted path only (no kernel/twin)
  std::string kv = "bf16";         // KV-cache format: verify/fp8_backend.hpp (bf16, fp8, fp4, codebook, fp8-A..D, ...)
  // --kv fp4 | codebook: calib.h5 with the per-layer fits, the FP4 rule and an optional c
  // override, whether calib.h5's protected layers keep a BF16 cache (transform/kv4_params.hpp).
  std::filesystem::path calib;
  std::string fp4_rule = "round";
  std::optional<float> fp4_c;
  bool kv4_protect = true;
  // --kv fp4 | codebook: the decode route (verify/kv4_backend.hpp): bf16 (BF16 dequantisation,
  // the BF16 decode) or fp8 (fp4 only: pages converted to FP8, the FP8 decode).
  std::string kv4_route = "bf16";
  int devices = 0;                 // > 0: also run every rank on its own device (multi_device_runner.hpp)
  std::string comm = "auto";       // with devices: nccl (cuda) | threads (in-process sums; cuda ranks may share GPUs)
  bool dcp = false;                // with devices: decode context parallelism (a tp = 1 conversion) instead of TPLA ranks
  int page_size = 64;
  uint64_t seed = 1;               // page permutation
  double max_rel_l2 = 2e-2;        // converted-vs-original thresholds (exit 2 beyond)
  double max_cos_diff = 1e-3;
  double kernel_rel_l2 = 8e-3;     // kernel-vs-f64-path bound (SPEC 5, BF16 kernels)
  bool perplexity = false;         // end-to-end mode (dense models only)
  // End to end: windows of prefill + decode tokens scored on both sides (rows P .. P+T-2 of
  // each window's logits, i.e. next-token predictions of tokens P+1 .. P+T-1, the positions the
  // converted side decodes). 0: --sequences windows of the capture group; with perplexity_text,
  // windows spread evenly over that byte file instead (the capture is then not read for them).
  int64_t perplexity_windows = 0;
  std::filesystem::path perplexity_text;
  int64_t perplexity_chunk = 8;    // windows per worker at once
  // f64: the float64 TPLA path (the conversion's own effect, device-independent, fast on a
  // CPU); kernel: the decode kernels (or their twins) token by token, bf16 cache included.
  std::string perplexity_path = "f64";
  int64_t threads = 0;             // end-to-end worker threads on the CPU; 0: all cores
  bool pd_separation = true;       // false: the prompt is also computed by TPLA (no exact prefill)
  double confidence = 0.95;
  LossThreshold max_loss_increase; // exit 2 when the interval's upper end exceeds it
  bool skip_manifest_check = false;
};

struct LayerReport {
  int64_t layer = 0;
  model::ErrorMetrics converted_vs_original;  // kernel path vs float64 original
  model::ErrorMetrics f64_path_vs_original;   // float64 converted path vs original
  model::ErrorMetrics kernel_vs_f64_path;     // kernel path vs float64 converted path
  // --devices: the ranks-on-devices output vs the one-device sequential sum (which it then
  // replaces as the kernel path above); must be within kDevicesRelTolerance.
  bool devices_ran = false;
  model::ErrorMetrics devices_vs_sequential;
  int64_t worst_sequence = -1;                // row with the largest relative error
  int64_t worst_token = -1;                   // decode step (0..T-1) of that row
  double worst_row_rel_l2 = 0.0;
  bool pass = false;
};

struct PerplexityReport {
  bool ran = false;
  int64_t windows = 0;
  int64_t predicted = 0;   // tokens scored (decode positions)
  double original_bits_per_byte = 0.0;
  double converted_bits_per_byte = 0.0;
  PairedComparison paired;              // same tokens both sides: difference and its interval
  std::vector<TokenScores> original, converted;  // per window (kept for the JSON)
  bool loss_pass = true;
};

struct VerifyReport {
  std::string backend;
  std::string devices;  // --devices: the multi-device runner's name; empty otherwise
  int tp = 1, g = 1;
  std::string reparam, norm;
  std::vector<LayerReport> layers;
  PerplexityReport perplexity;
  bool pass = false;
  nlohmann::json to_json(const VerifyOptions& o) const;
  std::string table(const VerifyOptions& o) const;
};


VerifyReport verify_decode(const VerifyOptions& opts);

}  // namespace mla::verify
