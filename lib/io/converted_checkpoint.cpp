#include "io/converted_checkpoint.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/fingerprint.hpp"
#include "io/mla_weights.hpp"
#include "io/sha256.hpp"

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

void check_manifest(const std::filesystem::path& converted, const std::filesystem::path& original) {
  const std::filesystem::path mpath = converted / "manifest.json";
  std::ifstream in(mpath);
  if (!in) throw InputError(mpath.string() + ": cannot open");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError(mpath.string() + ": not valid JSON: " + e.what());
  }
  if (!m.contains("outputs") || !m["outputs"].is_object() || m["outputs"].empty())
    throw InputError(mpath.string() + ": field 'outputs' missing or empty");
  for (const auto& [rel, sha] : m["outputs"].items()) {
    const std::filesystem::path f = converted / rel;
    if (!std::filesystem::exists(f)) throw VerificationError(mpath.string() + ": listed output '" + rel + "' is missing");
    const std::string actual = sha256_file(f);
    if (actual != sha.get<std::string>())
      throw VerificationError(f.string() + ": SHA-256 " + actual + " does not match the manifest's " + sha.get<std::string>());
  }
  const std::string recorded = m.at("input").at("checkpoint_fingerprint").get<std::string>();
  const std::string actual = fingerprint(Checkpoint::open(original));
  if (recorded != actual)
    throw VerificationError(mpath.string() + ": converted from checkpoint fingerprint " + recorded + ", but --original " +
                            original.string() + " has " + actual);
  spdlog::info("manifest: {} output files match their SHA-256; original fingerprint matches", m["outputs"].size());
}

}  // namespace mla::io
