// calib.h5 writer and JSON summary (format: docs/formats/calib.md).

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "calibration/calibrate.hpp"
#include "core/error.hpp"
#include "io/calib_file.hpp"
#include "io/hdf5.hpp"

namespace mla::calib {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ";" : "") + v[i];
  return s;
}

void write_fp4(io::h5::Group g, const Fp4ConstantFit& f) {
  g.set_attr("c_continuous", f.c_continuous);
  g.set_attr("mse_continuous", f.mse_continuous);
  g.set_attr("c_rounded", f.c_rounded);
  g.set_attr("mse_rounded", f.mse_rounded);
  g.set_attr("mse_rounded_c0156", f.mse_rounded_paper);
  g.set_attr("mse_ocp_floor", f.mse_ocp_floor);
  g.set_attr("mse_rceil", f.mse_rceil);
  g.set_attr("mse_nvfp4_g16", f.mse_nvfp4);
  g.set_attr("mse_int4_g32", f.mse_int4);
  g.set_attr("mean_square", f.mean_square);
  g.set_attr("values", f.values);
}

void write_codebook(io::h5::Group& parent, const std::string& name, const quant::Codebook& cb) {
  auto g = parent.create_group(name);
  g.write<double>("levels", cb.levels);
  g.set_attr("mse", cb.mse);
  g.set_attr("iterations", static_cast<int64_t>(cb.iterations));
  g.set_attr("converged", static_cast<int64_t>(cb.converged));
}

}  // namespace

void write_calib_h5(const CalibrationResult& r, const std::string& path) {
  io::h5::write_atomically(path, [&](io::h5::File& file) {
    auto& root = file.root();
    root.set_attr("schema", io::kCalibSchema);
    root.set_attr("checkpoint_fingerprint", r.checkpoint_fingerprint);
    root.set_attr("model_type", r.model_type);
    root.set_attr("kv_lora_rank", r.d_c);
    root.set_attr("num_heads", r.num_heads);
    root.set_attr("capture_sources", join(r.capture_sources));
    root.set_attr("corpus_sha256", join(r.corpus_sha256));
    root.set_attr("hadamard_seed", static_cast<int64_t>(r.hadamard_seed));
    root.set_attr("hadamard_convention", "U = D H / sqrt(d_c), D = diag(signs of mt19937_64(seed)), "
                                         "rotated latent U^T c (lib/quant/hadamard.hpp)");
    // The Hadamard-type basis measured (its results under /layer_*/g*/<name>, and the basis of
    // the FP4 / Lloyd-Max rows): "hadamard", or "hadamard-block" when d_c is not 2^k.
    root.set_attr("mixing_basis", r.mixing_basis);
    if (!r.hadamard_unavailable.empty()) root.set_attr("hadamard_unavailable", r.hadamard_unavailable);
    root.set_attr("holdout_fraction", r.holdout_fraction);
    root.set_attr("second_moment_accumulation", r.second_moment_accumulation);
    root.set_attr("tool_version", MLA_VERSION_STRING);
    int64_t tf = 0, th = 0;
    for (const auto& L : r.layers) { tf += L.tokens_fit; th += L.tokens_holdout; }
    root.set_attr("tokens_fit", r.layers.empty() ? 0 : r.layers[0].tokens_fit);
    root.set_attr("tokens_holdout", r.layers.empty() ? 0 : r.layers[0].tokens_holdout);
    std::vector<int64_t> layer_ids, prot;
    for (const auto& L : r.layers) {
      layer_ids.push_back(L.layer);
      if (L.protect) prot.push_back(L.layer);
      auto lg = root.create_group(io::h5::layer_group_name(L.layer));
      const int64_t d = r.d_c;
      lg.set_attr("tokens_fit", L.tokens_fit);
      lg.set_attr("tokens_holdout", L.tokens_holdout);
      lg.write<double>("second_moment", {uint64_t(d), uint64_t(d)}, L.second_moment.data());
      lg.write<double>("eigenvalues", {uint64_t(d)}, L.eigenvalues.data());
      const MatrixR basis = L.pca_basis;  // row-major on disk: basis(i, j), column j = vector j
      lg.write<double>("pca_basis", {uint64_t(d), uint64_t(d)}, basis.data());
      const MatrixR qk = L.qk_basis;
      lg.write<double>("qk_basis", {uint64_t(d), uint64_t(d)}, qk.data());
      lg.set_attr("qk_queries", L.qk_queries);
      lg.set_attr("qk_objective_pca", L.qk_objective_pca);
      lg.set_attr("qk_objective", L.qk_objective);
      for (const auto& [g, per_basis] : L.slices) {
        for (const auto& [b, st] : per_basis) {
          auto sg = lg.create_group(io::calib_slicing_group(g, b));
          sg.write<double>("energy_fraction", st.f);
          sg.write<double>("energy_fraction_holdout", st.f_holdout);
          sg.write<double>("norm_rel_error_holdout", st.norm_rel_error);
          if (L.have_pairs) {
            sg.write<double>("mu", st.mu);
            sg.write<double>("r2", st.r2);
            sg.write<double>("logit_fraction_holdout", st.logit_captured);
            sg.write<int32_t>("mu_guarded", std::vector<int32_t>(st.mu_guarded.begin(), st.mu_guarded.end()));
            if (st.mu_per_head.size()) {
              sg.write<double>("mu_per_head", {uint64_t(st.mu_per_head.rows()), uint64_t(g)},
                               st.mu_per_head.data());
            }
          }
        }
      }
      if (L.have_pairs) {
        auto fg = lg.create_group("fp8");
        fg.set_attr("queries", L.fp8_queries);
        for (const auto& [name, m] : L.fp8) {
          auto cg = fg.create_group(name);
          cg.set_attr("rmse", m.rmse);
          cg.set_attr("cos_diff", m.cos_diff);
          cg.set_attr("rel_l2", m.rel_l2);
        }
      }
      auto f4 = lg.create_group("fp4");
      write_fp4(std::move(f4), L.fp4);
      auto f4b = lg.open_group("fp4");
      f4b.set_attr("holdout_rel_mse", L.fp4_holdout_rel_mse);
      write_codebook(lg, "codebook", L.codebook);
      lg.open_group("codebook").set_attr("holdout_mse", L.codebook_holdout_mse);
      lg.set_attr("protect_bf16", static_cast<int64_t>(L.protect));
      lg.set_attr("protect_reason", L.protect_reason);
    }
    auto gl = root.create_group("global");
    gl.write<int64_t>("layers", layer_ids);
    gl.write<int64_t>("protected_layers", prot);
    write_fp4(gl.create_group("fp4"), r.global_fp4);
    write_codebook(gl, "codebook", r.global_codebook);
    auto an = gl.create_group("analytic");
    write_codebook(an, "gaussian_unit", r.analytic_gaussian_unit);
    write_codebook(an, "gaussian_1_over_d", r.analytic_gaussian_1_over_d);
    write_codebook(an, "sphere_coordinate", r.analytic_sphere);
    an.set_attr("d", r.d_c);
  });
}

std::string calib_summary_json(const CalibrationResult& r) {
  nlohmann::ordered_json j;
  j["schema"] = "mla-calib-summary/1";
  j["checkpoint_fingerprint"] = r.checkpoint_fingerprint;
  j["capture_sources"] = r.capture_sources;
  j["hadamard_seed"] = r.hadamard_seed;
  j["mixing_basis"] = r.mixing_basis;
  j["hadamard_unavailable"] = r.hadamard_unavailable.empty() ? nlohmann::ordered_json(nullptr)
                                                             : nlohmann::ordered_json(r.hadamard_unavailable);
  j["second_moment_accumulation"] = r.second_moment_accumulation;
  j["warnings"] = r.warnings;
  for (const auto& L : r.layers) {
    nlohmann::ordered_json l;
    l["layer"] = L.layer;
    l["tokens_fit"] = L.tokens_fit;
    l["tokens_holdout"] = L.tokens_holdout;
    l["qk"] = {{"queries", L.qk_queries}, {"objective_pca", L.qk_objective_pca}, {"objective", L.qk_objective},
               {"rotations", L.qk_rotations}};
    for (const auto& [g, per_basis] : L.slices) {
      for (const auto& [b, st] : per_basis) {
        auto& s = l[io::calib_group_name(g)][b];
        s["f"] = st.f;
        s["norm_rel_error_holdout"] = st.norm_rel_error;
        if (L.have_pairs) {
          s["mu"] = st.mu; s["r2"] = st.r2; s["mu_guarded"] = st.mu_guarded;
          s["logit_fraction_holdout"] = st.logit_captured;
          if (st.mu_per_head.size()) {
            std::vector<std::vector<double>> rows;
            for (Eigen::Index h = 0; h < st.mu_per_head.rows(); ++h)
              rows.emplace_back(st.mu_per_head.row(h).data(), st.mu_per_head.row(h).data() + st.mu_per_head.cols());
            s["mu_per_head"] = rows;
          }
        }
      }
    }
    for (const auto& [name, m] : L.fp8) l["fp8"][name] = {{"rmse", m.rmse}, {"cos_diff", m.cos_diff}, {"rel_l2", m.rel_l2}};
    l["fp4"] = {{"c_continuous", L.fp4.c_continuous}, {"c_rounded", L.fp4.c_rounded},
                {"rel_mse_rounded", L.fp4.mean_square > 0 ? L.fp4.mse_rounded / L.fp4.mean_square : 0.0},
                {"rel_mse_c0156", L.fp4.mean_square > 0 ? L.fp4.mse_rounded_paper / L.fp4.mean_square : 0.0},
                {"holdout_rel_mse", L.fp4_holdout_rel_mse}};
    l["codebook_mse"] = L.codebook.mse;
    l["protect_bf16"] = L.protect;
    l["protect_reason"] = L.protect_reason;
    j["layers"].push_back(l);
  }
  j["global"] = {{"fp4_c_rounded", r.global_fp4.c_rounded}, {"fp4_c_continuous", r.global_fp4.c_continuous},
                 {"codebook", r.global_codebook.levels}};
  return j.dump(2);
}

}  // namespace mla::calib
