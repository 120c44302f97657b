#pragma once
// TPLA placement, the one definition the float64 reference (model/tpla_reference), the
// converter (transform/tpla, transform/convert) and verify-decode share: which heads and which
// latent columns each of tp ranks holds, and the two normalisation modes.
//
// Rank r is in group k = r / (tp/g) and has index j = r % (tp/g) inside it:
//  - group k holds latent columns [k*d_c/g, (k+1)*d_c/g) for ALL heads;
//  - inside a group heads are split tp/g ways: rank j holds heads [j*H/(tp/g), (j+1)*H/(tp/g)).
// Every rank also holds the d_r RoPE rows (replicated). g = 1 is ordinary head-parallel MLA;
// g = tp gives every rank all heads and 1/tp of the latent.
#include <cstdint>
#include <string_view>

#include "model/config.hpp"

namespace mla::model {

// How a rank normalises its latent slice: Approx, locally with sqrt(g f_k) folded into its
// kv_a_layernorm; Exact, with the global RMS (one all-reduced sum of squares per token).
enum class NormMode { Approx, Exact };
std::string_view norm_mode_name(NormMode m);  // "approx" | "exact"
NormMode parse_norm_mode(std::string_view name);

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

struct TplaLayout {
  int tp = 1;
  int g = 1;
  int64_t num_heads = 0;      // H (global)
  int64_t kv_lora_rank = 0;   // d_c (global)

  // Checks tp in {1,2,4,8}, g | tp, H % (tp/g) == 0, d_c % g == 0; InputError names the
  // field and value otherwise.
  static TplaLayout make(const MlaConfig& cfg, int tp, int g);
  int ranks_per_group() const { return tp / g; }
  int group_of(int rank) const { return rank / ranks_per_group(); }
  int index_in_group(int rank) const { return rank % ranks_per_group(); }
  int64_t heads_per_rank() const { return num_heads / ranks_per_group(); }
  int64_t latent_per_group() const { return kv_lora_rank / g; }
  Range heads(int rank) const;   // of H
  Range latent(int rank) const;  // columns of d_c
};

}  // namespace mla::model
