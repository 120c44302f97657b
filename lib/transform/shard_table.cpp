#include "transform/shard_table.hpp"

#include "core/error.hpp"

namespace mla::transform {

std::string_view split_kind_name(SplitKind k) {
  switch (k) {
    case SplitKind::Replicated: return "replicated";
    case SplitKind::Column: return "column";
    case SplitKind::VocabColumn: return "vocab-column";
    case SplitKind::Row: return "row";
    case SplitKind::TplaHeads: return "tpla-heads";
    case SplitKind::TplaLatent: return "tpla-latent";
    case SplitKind::TplaLatentNorm: return "tpla-latent-norm";
    case SplitKind::TplaKvB: return "tpla-kv-b";
    case SplitKind::Consumed: return "consumed";
  }
  return "?";
}

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative matcher with backtracking to the last '*': linear for our patterns.
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (pi < p.size() && p[pi] == s[si]) {
      ++pi;
      ++si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

const ShardRule& find_rule(std::string_view name) {
  for (const ShardRule& r : kShardTable)
    if (glob_match(r.pattern, name)) return r;
  throw InputError("no sharding rule for tensor '" + std::string(name) +
                   "' (lib/transform/shard_table.hpp lists the known tensors)");
}

Slice2D simple_slice(const std::string& name, const Shape& shape, const ShardRule& rule,
                     const TplaLayout& layout, int rank, int64_t per_head) {
  const bool is2d = shape.size() == 2;
  if (shape.empty() || shape.size() > 2)
    throw InputError("tensor '" + name + "' has shape " + shape_to_string(shape) + ", expected 1-D or 2-D");
  const int64_t rows = is2d ? shape[0] : 1, cols = is2d ? shape[1] : shape[0];
  Slice2D s{{0, rows}, {0, cols}};
  auto split = [&](int dim, int parts, int index, int64_t unit) {
    if (dim >= static_cast<int>(shape.size()))
      throw InputError("tensor '" + name + "' has shape " + shape_to_string(shape) + ": no dim " +
                       std::to_string(dim) + " to split (" + std::string(split_kind_name(rule.kind)) + ")");
    const int64_t n = shape[dim];
    if (n % (parts * unit) != 0)
      throw InputError("tensor '" + name + "' dim " + std::to_string(dim) + " = " + std::to_string(n) +
                       " is not divisible by " + std::to_string(parts) +
                       (unit > 1 ? " x " + std::to_string(unit) + " (per head)" : "") + " for a " +
                       std::string(split_kind_name(rule.kind)) + " split");
    const int64_t part = n / parts;
    Range r{index * part, (index + 1) * part};
    if (!is2d || dim == 1) s.cols = r; else s.rows = r;
  };
  switch (rule.kind) {
    case SplitKind::Replicated: break;
    case SplitKind::Column: split(0, layout.tp, rank, 1); break;
    case SplitKind::VocabColumn:
      if (shape[0] % layout.tp == 0) split(0, layout.tp, rank, 1);  // else every rank holds all of it
      break;
    case SplitKind::Row: split(1, layout.tp, rank, 1); break;
    case SplitKind::TplaHeads:
      if (shape[rule.dim] != layout.num_heads * per_head)
        throw InputError("tensor '" + name + "' dim " + std::to_string(rule.dim) + " = " +
                         std::to_string(shape[rule.dim]) + ", expected num_attention_heads x " +
                         std::to_string(per_head) + " = " + std::to_string(layout.num_heads * per_head));
      split(rule.dim, layout.ranks_per_group(), layout.index_in_group(rank), per_head);
      break;
    default:
      throw InputError("tensor '" + name + "': rule " + std::string(split_kind_name(rule.kind)) +
                       " is not a simple slice");
  }
  return s;
}

}  // namespace mla::transform
