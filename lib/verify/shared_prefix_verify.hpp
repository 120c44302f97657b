#pragma once
// verify-decode --shared-prefix N: the mixed (TyphoonMLA) decode path on a converted tp = 1
// checkpoint against the ORIGINAL model in float64, per layer.
//
// The first N attention inputs of every captured sequence are made identical (sequence 0's), so
// the batch shares an N-token prefix (N <= P, the prefilled prompt). Per layer:
//   original: attention_naive(original weights) on all P + T tokens, rows P.. compared;
//   mixed:    the converted weights' latent rows: the shared prefix's N rows in their own pages
//             are decompressed once (kv_b_proj, bf16) into per-head K/V; each sequence's tokens
//             N.. sit in its own pages; each of the T decode steps runs naive attention over the
//             prefix, the absorbed kernel over the own pages and the W_UV + LSE merge (kernels on
//             --device cuda, CPU twins on cpu), then o_proj;
//   float64:  the same converted computation without bf16 or kernels (absorbed form over the
//             whole cache), separating the conversion's error from the kernels'.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/metrics.hpp"
#include "verify/verify_decode.hpp"

namespace mla::verify {

struct SharedPrefixLayerReport {
  int64_t layer = 0;
  model::ErrorMetrics mixed_vs_original;  // kernel path vs float64 original
  model::ErrorMetrics f64_vs_original;    // float64 converted path vs original
  model::ErrorMetrics mixed_vs_f64;       // kernel path vs float64 converted path
  bool pass = false;
};

struct SharedPrefixReport {
  std::string backend;
  int64_t shared_prefix = 0;
  std::vector<SharedPrefixLayerReport> layers;
  bool pass = false;
  nlohmann::json to_json(const VerifyOptions& o) const;
  std::string table(const VerifyOptions& o) const;
};

// Uses o.original, o.converted (tp must be 1), o.activations, o.capture_group, o.prefill,
// o.decode, o.sequences, o.layers, o.device, o.page_size, o.seed, o.max_rel_l2, o.max_cos_diff,
// o.kernel_rel_l2 (and the manifest check unless o.skip_manifest_check).
SharedPrefixReport verify_shared_prefix(const VerifyOptions& o, int64_t shared_prefix);

}  // namespace mla::verify
