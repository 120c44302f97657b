#include "io/converted_checkpoint.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/mla_weights.hpp"

namespace mla::io {

std::string rank_dir_name(int rank, int tp) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%02d-of-%02d", rank, tp);
  return buf;
}

RankAttention load_rank_attention(const std::filesystem::path& rank_dir, int64_t layer) {
  const Checkpoint ckpt = Checkpoint::open(rank_dir);
  RankAttention ra;
  ra.config = ckpt.config();
  if (!ckpt.config_json().contains("tpla"))
    throw InputError(rank_dir.string() + "/config.json has no 'tpla' section: not an mla-convert output");
  ra.tpla = ckpt.config_json()["tpla"];
  ra.weights = load_attention_weights(ckpt, layer);
  return ra;
}

}  // namespace mla::io
