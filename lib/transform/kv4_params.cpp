#include "transform/kv4_params.hpp"

#include <cmath>

#include "core/error.hpp"
#include "io/hdf5.hpp"
#include "quant/kv4_cache_common.hpp"
#include "transform/reparam.hpp"

namespace mla::transform {

bool is_kv4_format(const std::string& format) { return format == "fp4" || format == "codebook"; }

quant::Fp4ScaleRule parse_fp4_rule(const std::string& name) {
  for (auto r : {quant::Fp4ScaleRule::Round, quant::Fp4ScaleRule::OcpFloor, quant::Fp4ScaleRule::Rceil})
    if (name == quant::fp4_rule_name(r)) return r;
  throw InputError("--fp4-rule: unknown rule '" + name + "' (one of: round, ocp_floor, rceil)");
}

Kv4Params load_kv4_params(const std::filesystem::path& calib, const std::string& format, int64_t num_layers,
                          const Kv4Choice& choice) {
  if (!is_kv4_format(format)) throw InputError("4-bit KV format must be fp4 or codebook, got '" + format + "'");
  Kv4Params p;
  p.format = format;
  p.calib = calib.string();
  p.rule = parse_fp4_rule(choice.rule);
  if (choice.c && !(std::isfinite(*choice.c) && *choice.c > 0.f))
    throw InputError("--fp4-c = " + std::to_string(*choice.c) + " (must be finite and > 0)");
  p.c_source = choice.c ? std::to_string(*choice.c) : "fitted";
  const std::string file = calib.string();
  io::h5::File f = io::h5::File::open_read(calib);
  const io::h5::Group& root = f.root();
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string lg = io::h5::layer_group_name(i);
    auto need = [&](const std::string& path) {
      if (!root.exists(path))
        throw InputError(file + ": '/" + path + "' is missing (a calib.h5 of mla-calibrate with FP4/Lloyd-Max fits; "
                         "d_c a multiple of 32)");
    };
    need(lg + "/fp4");
    need(lg + "/codebook/levels");
    const io::h5::Group g = root.open_group(lg);
    const io::h5::Group g4 = root.open_group(lg + "/fp4");
    Kv4LayerParams L;
    for (const char* a : {"c_rounded", "mean_square"})
      if (!g4.has_attr(a)) throw InputError(file + ": attribute '" + a + "' of '/" + lg + "/fp4' is missing");
    L.c_fitted = static_cast<float>(g4.attr_double("c_rounded"));
    L.codebook_mean_square = g4.attr_double("mean_square");
    const io::h5::Dims dims = root.open(lg + "/codebook/levels").dims();
    if (dims != io::h5::Dims{16})
      throw InputError(file + ": '/" + lg + "/codebook/levels' must hold 16 levels");
    L.codebook_levels = root.read<double>(lg + "/codebook/levels");
    try {
      L.codebook = quant::codebook_unit_levels(L.codebook_levels, L.codebook_mean_square);
    } catch (const InputError& e) {
      throw InputError(file + ": layer " + std::to_string(i) + ": " + e.what());
    }
    L.fp4 = quant::Fp4CacheEncoding{p.rule, choice.c ? *choice.c : L.c_fitted};
    try {
      quant::validate_fp4_encoding(L.fp4);
    } catch (const InputError& e) {
      throw InputError(file + ": '/" + lg + "/fp4' c_rounded: " + e.what());
    }
    if (choice.protect && g.has_attr("protect_bf16")) {
      L.protect_bf16 = g.attr_int("protect_bf16") != 0;
      if (g.has_attr("protect_reason")) L.protect_reason = g.attr_string("protect_reason");
    }
    p.layers.push_back(std::move(L));
  }
  return p;
}

nlohmann::json kv4_params_json(const Kv4Params& p) {
  nlohmann::json layers = nlohmann::json::array(), prot = nlohmann::json::array();
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& L = p.layers[i];
    nlohmann::json j = {{"layer", i}, {"protect_bf16", L.protect_bf16}};
    if (p.format == "fp4") {
      j["c"] = L.fp4.c;
    } else {
      j["levels"] = std::vector<float>(L.codebook.levels, L.codebook.levels + quant::kCodebookLevels);
    }
    layers.push_back(j);
    if (L.protect_bf16) prot.push_back(i);
  }
  nlohmann::json out = {{"calib", p.calib}, {"layers", layers}, {"protected_layers", prot}};
  if (p.format == "fp4") {
    out["rule"] = std::string(quant::fp4_rule_name(p.rule));
    out["c_source"] = p.c_source;
  }
  return out;
}

Kv4Params kv4_params_from_section(const nlohmann::json& k, const std::string& where, const Kv4Choice& choice) {
  auto bad = [&](const std::string& what) { throw InputError(where + ": kv_cache " + what); };
  if (!k.is_object() || !k.contains("format") || !k["format"].is_string()) bad("section has no format");
  const std::string f = k["format"];
  Kv4Params p;
  if (f == "fp4_e2m1_ue8m0_g32") {
    p.format = "fp4";
  } else if (f == "codebook4_lloyd_max_per_token_rms") {
    p.format = "codebook";
  } else {
    bad("format '" + f + "' is not a 4-bit format");
  }
  p.calib = where;
  const std::string rule = k.contains("scale") ? k["scale"].value("rule", std::string("round")) : "round";
  p.rule = parse_fp4_rule(choice.rule != "round" ? choice.rule : rule);
  p.c_source = choice.c ? std::to_string(*choice.c) : "recorded";
  if (!k.contains("layers") || !k["layers"].is_array()) bad("section has no layers array");
  for (size_t i = 0; i < k["layers"].size(); ++i) {
    const nlohmann::json& lj = k["layers"][i];
    const std::string at = "layers[" + std::to_string(i) + "]";
    Kv4LayerParams L;
    L.protect_bf16 = choice.protect && lj.value("protect_bf16", false);
    if (p.format == "fp4") {
      if (!lj.contains("c") || !lj["c"].is_number()) bad(at + " has no number c");
      L.c_fitted = lj["c"].get<float>();
      L.fp4 = quant::Fp4CacheEncoding{p.rule, choice.c ? *choice.c : L.c_fitted};
      try {
        quant::validate_fp4_encoding(L.fp4);
      } catch (const InputError& e) {
        bad(at + ": " + e.what());
      }
    } else {
      if (!lj.contains("levels") || !lj["levels"].is_array() || lj["levels"].size() != 16)
        bad(at + " has no 16 levels");
      for (int q = 0; q < 16; ++q) {
        if (!lj["levels"][q].is_number()) bad(at + ".levels[" + std::to_string(q) + "] is not a number");
        L.codebook.levels[q] = lj["levels"][q].get<float>();
        L.codebook_levels.push_back(L.codebook.levels[q]);
      }
      L.codebook_mean_square = 1.0;
      try {
        quant::validate_codebook_table(L.codebook);
      } catch (const InputError& e) {
        bad(at + ": " + e.what());
      }
    }
    p.layers.push_back(std::move(L));
  }
  return p;
}

Kv4Params plan_kv4_conversion(const std::filesystem::path& calib, const std::string& format, int64_t num_layers,
                              int64_t d_c, int64_t d_r, int g, std::optional<uint64_t> seed,
                              const std::string& rotation_mode, std::map<int64_t, MatrixR>& rotations,
                              nlohmann::json& rotation_json) {
  if (!is_kv4_format(format)) throw InputError("4-bit KV format must be fp4 or codebook, got '" + format + "'");
  if (g < 1 || d_c % g != 0)
    throw InputError("--kv-cache " + format + ": d_c = " + std::to_string(d_c) + " does not split into g = " +
                     std::to_string(g) + " slices");
  quant::validate_kv4_dims("--kv-cache " + format + " (TPLA slice of g = " + std::to_string(g) + ")", 64,
                           static_cast<int>(d_c / g), static_cast<int>(d_r));
  if (calib.empty())
    throw InputError("--kv-cache " + format + " needs --calib calib.h5 (mla-calibrate's fitted c, codebooks and "
                     "protected layers)");
  if (rotation_mode != "hadamard" && rotation_mode != "none")
    throw InputError("--kv-rotation must be hadamard or none, got '" + rotation_mode + "'");
  Kv4Params p = load_kv4_params(calib, format, num_layers, Kv4Choice{});
  if (rotation_mode == "hadamard") {
    const MatrixR r = kv4_slice_rotation(d_c, g, seed, "--kv-cache " + format);
    for (auto& [layer, u] : rotations) u = u * r;
    rotation_json = {{"kind", "walsh_hadamard_per_slice"},
                     {"blocks", g},
                     {"block_width", d_c / g},
                     {"seed", seed ? nlohmann::json(*seed) : nlohmann::json(nullptr)},
                     {"convention", "U = U_basis * blockdiag(D H_w / sqrt(w)); latent rows of kv_a_proj_with_mqa <- "
                                    "U^T W, kv_b_proj <- W U (lib/transform/reparam.hpp kv4_slice_rotation)"},
                     {"folded_into_weights", true}};
  } else {
    rotation_json = {{"kind", "none"}, {"folded_into_weights", true}};
  }
  return p;
}

}  // namespace mla::transform
