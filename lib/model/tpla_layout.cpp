#include "model/tpla_layout.hpp"

#include <string>

#include "core/error.hpp"

namespace mla::model {

std::string_view norm_mode_name(NormMode m) { return m == NormMode::Exact ? "exact" : "approx"; }

NormMode parse_norm_mode(std::string_view name) {
  if (name == "approx") return NormMode::Approx;
  if (name == "exact") return NormMode::Exact;
  throw InputError("unknown --norm mode '" + std::string(name) + "' (expected approx or exact)");
}

TplaLayout TplaLayout::make(const MlaConfig& cfg, int tp, int g) {
  if (tp != 1 && tp != 2 && tp != 4 && tp != 8)
    throw InputError("--tp must be 1, 2, 4 or 8, got " + std::to_string(tp));
  if (g < 1 || tp % g != 0)
    throw InputError("--groups must divide --tp = " + std::to_string(tp) + ", got " + std::to_string(g));
  TplaLayout l{tp, g, cfg.num_heads, cfg.kv_lora_rank};
  if (cfg.num_heads % l.ranks_per_group() != 0)
    throw InputError("config.json num_attention_heads = " + std::to_string(cfg.num_heads) +
                     " is not divisible by tp/g = " + std::to_string(l.ranks_per_group()) +
                     " (heads are split tp/g ways inside a latent group)");
  if (cfg.kv_lora_rank % g != 0)
    throw InputError("config.json kv_lora_rank = " + std::to_string(cfg.kv_lora_rank) +
                     " is not divisible by g = " + std::to_string(g) + " latent groups");
  return l;
}

Range TplaLayout::heads(int rank) const {
  const int64_t n = heads_per_rank();
  return {index_in_group(rank) * n, (index_in_group(rank) + 1) * n};
}

Range TplaLayout::latent(int rank) const {
  const int64_t n = latent_per_group();
  return {group_of(rank) * n, (group_of(rank) + 1) * n};
}

}  // namespace mla::model
