#pragma once
// The one declarative table that says how every tensor of an MLA checkpoint is sharded over
// tp ranks (docs/sharding.md is generated from the same entries by hand and must match).
// First matching pattern wins; '*' matches any run of characters (including dots). A tensor
// that matches no rule is an error: nothing is sharded by accident.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor.hpp"
#include "transform/tpla.hpp"

namespace mla::transform {

enum class SplitKind {
  Replicated,     // every rank holds the whole tensor
  Column,         // Megatron column-parallel: dim 0 (output features) split tp ways
  VocabColumn,    // vocab-parallel (dim 0 split tp ways), or replicated when tp does not divide
                  // the vocabulary: the tokenizer fixes it, and replication computes the same logits
  Row,            // Megatron row-parallel: dim 1 (input features) split tp ways
  TplaHeads,      // head blocks along `dim` split tp/g ways inside a group, same in every group
  TplaLatent,     // kv_a_proj_with_mqa: latent rows of group k + the d_r RoPE rows (replicated)
  TplaLatentNorm, // kv_a_layernorm: group k's slice, value sqrt(g f_k) (or 1, --norm exact)
  TplaKvB,        // kv_b_proj: rank's heads' row blocks x group k's latent columns, mu on W_UK
  Consumed,       // `<w>_scale_inv`: dequantised into its weight, re-made fresh for FP8 output
};
std::string_view split_kind_name(SplitKind k);

// What the split needs to be exact (checked per tensor before anything is written).
enum class Divisibility {
  None,
  DimByTp,          // shape[dim] % tp == 0
  HeadsByTpOverG,   // H % (tp/g) == 0 (TplaLayout::make checks it once)
  LatentByG,        // d_c % g == 0 (ditto)
};

struct ShardRule {
  std::string_view pattern;
  SplitKind kind;
  int dim;  // the split dimension (-1: none)
  Divisibility rule;
  std::string_view why;  // one line for docs/sharding.md and --dry-run
};

// The table. Order matters (first match wins).
inline constexpr std::array kShardTable = std::to_array<ShardRule>({
  {"*_scale_inv", SplitKind::Consumed, -1, Divisibility::None, "FP8 block scales: dequantised into their weight"},
  {"*.self_attn.q_proj.weight", SplitKind::TplaHeads, 0, Divisibility::HeadsByTpOverG, "V2 query: rank's heads' rows"},
  {"*.self_attn.q_a_proj.weight", SplitKind::Replicated, -1, Divisibility::None, "query down-projection (small)"},
  {"*.self_attn.q_a_layernorm.weight", SplitKind::Replicated, -1, Divisibility::None, "query RMSNorm"},
  {"*.self_attn.q_b_proj.weight", SplitKind::TplaHeads, 0, Divisibility::HeadsByTpOverG, "query up-projection: rank's heads' rows"},
  {"*.self_attn.kv_a_proj_with_mqa.weight", SplitKind::TplaLatent, 0, Divisibility::LatentByG, "latent rows of group k (rotated) + RoPE rows"},
  {"*.self_attn.kv_a_layernorm.weight", SplitKind::TplaLatentNorm, 0, Divisibility::LatentByG, "gamma absorbed; sqrt(g f_k) or 1"},
  {"*.self_attn.kv_b_proj.weight", SplitKind::TplaKvB, 0, Divisibility::HeadsByTpOverG, "heads' rows x latent columns of group k; gamma, U, mu folded"},
  {"*.self_attn.o_proj.weight", SplitKind::TplaHeads, 1, Divisibility::HeadsByTpOverG, "row-parallel over the rank's heads' columns; all-reduce sums ranks"},
  {"*embed_tokens.weight", SplitKind::VocabColumn, 0, Divisibility::None, "vocab-parallel embedding (replicated if tp does not divide the vocabulary)"},
  {"lm_head.weight", SplitKind::VocabColumn, 0, Divisibility::None, "vocab-parallel output head (replicated if tp does not divide the vocabulary)"},
  {"*.shared_head.head.weight", SplitKind::VocabColumn, 0, Divisibility::None, "MTP output head, vocab-parallel (or replicated, as lm_head)"},
  {"*.mlp.gate.weight", SplitKind::Replicated, -1, Divisibility::None, "MoE router"},
  {"*.mlp.gate.e_score_correction_bias", SplitKind::Replicated, -1, Divisibility::None, "MoE router bias"},
  {"*.gate_proj.weight", SplitKind::Column, 0, Divisibility::DimByTp, "dense, shared and routed experts: column-parallel"},
  {"*.up_proj.weight", SplitKind::Column, 0, Divisibility::DimByTp, "dense, shared and routed experts: column-parallel"},
  {"*.down_proj.weight", SplitKind::Row, 1, Divisibility::DimByTp, "dense, shared and routed experts: row-parallel"},
  {"*.eh_proj.weight", SplitKind::Replicated, -1, Divisibility::None, "MTP input projection"},
  {"*norm.weight", SplitKind::Replicated, -1, Divisibility::None, "RMSNorm gammas (input, post-attention, final, MTP)"},
});

// Glob with '*' only.
bool glob_match(std::string_view pattern, std::string_view name);
// The first rule matching `name`; InputError "no sharding rule for tensor '<name>'" otherwise.
const ShardRule& find_rule(std::string_view name);

// The rank's slice of a tensor of shape `shape` under a simple rule (Replicated, Column, Row,
// TplaHeads with `per_head` rows/cols per head): checks the rule's divisibility, naming the
// tensor, dim and value; returns the row range and column range (1-D tensors: cols only).
struct Slice2D {
  Range rows;
  Range cols;
};
Slice2D simple_slice(const std::string& name, const Shape& shape, const ShardRule& rule,
                     const TplaLayout& layout, int rank, int64_t per_head);

}  // namespace mla::transform
