// Markdown report and a per-layer PNG (gnuplot, like SnapMLA figure 4) for mla-calibrate.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibration/calibrate.hpp"
#include "core/error.hpp"

namespace mla::calib {

namespace {
std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}
std::string vec(const std::vector<double>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ' ';
    s += fmt(v[i]);  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "" + std::string
  }
  return s;
}
}  // namespace

void write_report(const CalibrationResult& r, const std::string& md_path) {
  namespace fs = std::filesystem;
  const fs::path md(md_path);
  const fs::path stem = md.parent_path() / md.stem();
  std::ostringstream o;
  o << "# Calibration report\n\n";
  o << "- checkpoint fingerprint: `" << r.checkpoint_fingerprint << "`\n";
  for (std::size_t i = 0; i < r.capture_sources.size(); ++i)
    o << "- capture: " << r.capture_sources[i] << " (corpus sha256 " << r.corpus_sha256[i] << ")\n";
  o << "- d_c = " << r.d_c << ", heads = " << r.num_heads << ", Hadamard seed = " << r.hadamard_seed
    << ", held-out fraction = " << r.holdout_fraction << "\n";
  for (const auto& w : r.warnings) o << "- **warning**: " << w << "\n";
  o << "\n## Energy fractions f_k (fit part) and held-out RMSNorm slicing error\n\n";
  o << "| layer | g | basis | f_k | held-out norm rel. error per slice |\n|---|---|---|---|---|\n";
  for (const auto& L : r.layers)
    for (const auto& [g, pb] : L.slices)
      for (const auto& [b, st] : pb)
        o << "| " << L.layer << " | " << g << " | " << b << " | " << vec(st.f) << " | "
          << vec(st.norm_rel_error) << " |\n";
  o << "\n## Softmax slicing factor mu_k (fit part) and R^2 (held-out pairs)\n\n";
  o << "| layer | g | basis | mu_k | R^2 | guarded (mu kept 1) |\n|---|---|---|---|---|---|\n";
  for (const auto& L : r.layers) {
    if (!L.have_pairs) { o << "| " << L.layer << " | - | - | not computed: capture has no `hidden` (queries need h) | | |\n"; continue; }
    for (const auto& [g, pb] : L.slices)
      for (const auto& [b, st] : pb) {
        std::vector<double> gd(st.mu_guarded.begin(), st.mu_guarded.end());
        o << "| " << L.layer << " | " << g << " | " << b << " | " << vec(st.mu) << " | " << vec(st.r2)
          << " | " << vec(gd) << " |\n";
      }
  }
  o << "\n## Content logit kept per slice, sum z p_k / sum z^2 (held-out pairs)\n\n";
  o << "PCA keeps latent energy; the qk basis (eigenvectors of (M_u M_q + M_q M_u) / 2) keeps the logit "
       "q.u itself (docs/math.md).\n\n";
  o << "| layer | g | basis | logit fraction per slice |\n|---|---|---|---|\n";
  for (const auto& L : r.layers) {
    if (!L.have_pairs) continue;
    for (const auto& [g, pb] : L.slices)
      for (const auto& [b, st] : pb) o << "| " << L.layer << " | " << g << " | " << b << " | " << vec(st.logit_captured) << " |\n";
  }
  o << "\n## FP8 attention-output error (SnapMLA configurations)\n\n";
  o << "| layer | config | RMSE | 1-cos | rel. L2 |\n|---|---|---|---|---|\n";
  for (const auto& L : r.layers)
    for (const auto& [n, m] : L.fp8)
      o << "| " << L.layer << " | " << n << " | " << fmt(m.rmse) << " | " << fmt(m.cos_diff) << " | "
        << fmt(m.rel_l2) << " |\n";
  o << "\n## FP4 (Hadamard-rotated cache, groups of 32): relative MSE = MSE / E[x^2]\n\n";
  o << "| layer | c continuous | c rounded (fit) | rounded fit | rounded c=0.156 | OCP floor | RCEIL | NVFP4-like g16 | INT4 g32 | Lloyd-Max 16 | held-out rounded fit | BF16? |\n";
  o << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  auto row = [&](const std::string& name, const Fp4ConstantFit& f, double lm, double hold, const std::string& prot) {
    const double ms = f.mean_square > 0 ? f.mean_square : 1.0;
    o << "| " << name << " | " << fmt(f.c_continuous) << " | " << fmt(f.c_rounded) << " | "
      << fmt(f.mse_rounded / ms) << " | " << fmt(f.mse_rounded_paper / ms) << " | " << fmt(f.mse_ocp_floor / ms)
      << " | " << fmt(f.mse_rceil / ms) << " | " << fmt(f.mse_nvfp4 / ms) << " | " << fmt(f.mse_int4 / ms) << " | "
      << fmt(lm / ms) << " | " << hold << " | " << prot << " |\n";
  };
  for (const auto& L : r.layers)
    row(std::to_string(L.layer), L.fp4, L.codebook.mse, L.fp4_holdout_rel_mse, L.protect ? L.protect_reason : "");
  row("global", r.global_fp4, r.global_codebook.mse, 0, "");
  o << "\nGlobal Lloyd-Max codebook: " << vec(r.global_codebook.levels) << "\n\n";
  o << "Analytic anchors (16 levels): N(0,1) top centroid " << fmt(r.analytic_gaussian_unit.levels.back())
    << " (MSE " << fmt(r.analytic_gaussian_unit.mse) << "); N(0,1/d_c) top " << fmt(r.analytic_gaussian_1_over_d.levels.back())
    << "; sphere coordinate Beta((d-1)/2,(d-1)/2) at d = d_c top " << fmt(r.analytic_sphere.levels.back()) << ".\n";

  // Per-layer FP8 plot (three panels like SnapMLA figure 4), when gnuplot is available.
  bool any_fp8 = false;
  for (const auto& L : r.layers) any_fp8 |= !L.fp8.empty();
  if (any_fp8 && std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    const fs::path dat = stem.string() + "_fp8.dat", png = stem.string() + "_fp8.png";
    std::ofstream d(dat);
    std::vector<std::string> names;
    for (const auto& [n, m] : r.layers[0].fp8) names.push_back(n);
    d << "# layer";
    for (const auto& n : names) d << " " << n << "_rmse " << n << "_cos " << n << "_rel";
    d << "\n";
    for (const auto& L : r.layers) {
      d << L.layer;
      for (const auto& n : names) {
        const auto it = L.fp8.find(n);
        const Fp8Metrics m = it == L.fp8.end() ? Fp8Metrics{} : it->second;
        d << " " << m.rmse << " " << m.cos_diff << " " << m.rel_l2;
      }
      d << "\n";
    }
    d.close();
    const fs::path gp = stem.string() + "_fp8.gp";
    std::ofstream g(gp);
    g << "set terminal pngcairo size 1500,450 noenhanced\nset output '" << png.string() << "'\n"
      << "set multiplot layout 1,3\nset logscale y\nset key outside bottom center horizontal\nset xlabel 'layer'\n";
    const char* titles[3] = {"RMSE", "1 - cos", "relative L2"};
    for (int k = 0; k < 3; ++k) {
      g << "set title '" << titles[k] << "'\nplot ";
      for (std::size_t i = 0; i < names.size(); ++i)
        g << (i ? ", " : "") << "'" << dat.string() << "' using 1:" << 2 + 3 * i + k << " with linespoints title '" << names[i] << "'";
      g << "\n";
    }
    g << "unset multiplot\n";
    g.close();
    const std::string cmd = "gnuplot '" + gp.string() + "' 2>/dev/null";
    if (std::system(cmd.c_str()) == 0) {
      o << "\n![FP8 per-layer error](" << png.filename().string() << ")\n";
    }
  }
  std::ofstream out(md);
  if (!out) throw Error("cannot write report " + md_path);
  out << o.str();
}

}  // namespace mla::calib
