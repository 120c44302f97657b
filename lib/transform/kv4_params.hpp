#pragma once
// The per-layer parameters of a 4-bit KV cache (docs/formats/kv-fp4.md) as mla-calibrate fitted
// them (calib.h5, docs/formats/calib.md), for mla-convert (recorded in the converted config) and
// verify-decode --kv fp4|codebook (the caches it writes):
//   /layer_{i:02d}/fp4 attrs c_rounded (the fitted constant with power-of-two rounding in the
//                        loop), mean_square (of the Hadamard-rotated rows it was fitted on)
//   /layer_{i:02d}/codebook/levels  f64 [16] (Lloyd-Max on those rows)
//   /layer_{i:02d} attrs protect_bf16 (0/1), protect_reason
// The codebook levels are converted to per-token RMS units (quant::codebook_unit_levels).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <map>

#include "core/tensor.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"

namespace mla::transform {

// "fp4" or "codebook".
bool is_kv4_format(const std::string& format);

struct Kv4LayerParams {
  bool protect_bf16 = false;      // this layer's cache stays BF16
  std::string protect_reason;
  float c_fitted = 0.f;           // calib.h5 c_rounded
  quant::Fp4CacheEncoding fp4;    // the rule and c the cache is written with
  std::vector<double> codebook_levels;  // as fitted (calibration units)
  double codebook_mean_square = 0;      // of the fitted rows
  quant::CodebookTable codebook;        // in RMS units: what the cache uses
};

struct Kv4Params {
  std::string format;                 // fp4 | codebook
  std::string calib;                  // source file
  std::string c_source;               // "fitted" or the override's value
  quant::Fp4ScaleRule rule = quant::Fp4ScaleRule::Round;
  std::vector<Kv4LayerParams> layers;  // one per attention layer
};

// How verify-decode / mla-convert choose among the fitted values.
struct Kv4Choice {
  std::string rule = "round";          // round | ocp_floor | rceil
  std::optional<float> c;              // override of the fitted per-layer c (e.g. 0.156)
  bool protect = true;                 // honour calib.h5's protect_bf16 flags
};

quant::Fp4ScaleRule parse_fp4_rule(const std::string& name);

// Reads layers [0, num_layers). InputError naming the file and object on a missing group,
// attribute or dataset, a wrong shape, a non-finite value, or an unusable table.
Kv4Params load_kv4_params(const std::filesystem::path& calib, const std::string& format, int64_t num_layers,
                          const Kv4Choice& choice);

// The record of the parameters for a config.json kv_cache section (format, rule, c per layer,
// the RMS-unit tables, protected layers).
nlohmann::json kv4_params_json(const Kv4Params& p);

// The parameters a converted rank's config.json records (its `kv_cache` section, written by
// kv4_cache_section): format, rule, per-layer c or RMS-unit levels, protected layers. `where`
// names the file in errors (InputError for a missing or malformed field, naming it). Choice
// overrides as for load_kv4_params (c, rule; protect = false quantises the protected layers).
Kv4Params kv4_params_from_section(const nlohmann::json& kv_cache, const std::string& where, const Kv4Choice& choice);

// mla-convert --kv fp4|codebook: loads the parameters from `calib` (required: InputError naming
// the option otherwise) and, unless rotation_mode is "none", composes every layer's rotation
// (the map of convert.cpp: per layer, or shared under key -1) with kv4_slice_rotation(d_c, g,
// seed) (transform/reparam.hpp). rotation_mode: "hadamard" | "none". Returns the parameters and
// fills `rotation_json`, the description recorded in each rank's kv_cache section. The slice
// width d_c / g and d_r are checked against the 4-bit layouts first (before any weight is written).
Kv4Params plan_kv4_conversion(const std::filesystem::path& calib, const std::string& format, int64_t num_layers,
                              int64_t d_c, int64_t d_r, int g, std::optional<uint64_t> seed,
                              const std::string& rotation_mode,
                              std::map<int64_t, MatrixR>& rotations, nlohmann::json& rotation_json);

}  // namespace mla::transform
