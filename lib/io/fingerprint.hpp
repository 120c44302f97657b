#pragma once
// Identity of a checkpoint's attention, so that a calibration (PCA basis, energy fractions,
// mu) made for one checkpoint is rejected on another. The fingerprint is the hex SHA-256 of:
//   "mla-fingerprint-v1\n"
//   one line per canonical attention config field, "key=value\n" (fixed order, see .cpp)
//   for every attention layer i (decoder layers, then MTP layers when present), for each of
//     model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight   (+ its _scale_inv if present)
//     model.layers.{i}.self_attn.kv_a_layernorm.weight
//     model.layers.{i}.self_attn.kv_b_proj.weight             (+ its _scale_inv if present)
//   a record "name\ndtype\nshape\n<byte count>\n" followed by the raw tensor bytes.
// The bytes are hashed as stored, so a BF16 re-export of an FP8 model is a different
// checkpoint (a calibration refers to the exact weights it saw).
#include <filesystem>
#include <string>

#include "io/checkpoint.hpp"

namespace mla::io {

// Throws InputError when a decoder layer lacks one of the three tensors (MTP layers that a
// checkpoint does not ship are skipped: many exports drop them).
std::string fingerprint(const Checkpoint& ckpt);

// Canonical text of the config fields the fingerprint covers (exposed for tests and docs).
std::string fingerprint_config_text(const model::MlaConfig& cfg);

// Hex SHA-256 of a file's bytes (streamed; throws Error when unreadable).
std::string sha256_file(const std::filesystem::path& path);

}  // namespace mla::io
