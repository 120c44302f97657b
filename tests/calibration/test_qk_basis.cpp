// The qk latent basis (calibration/qk_basis.hpp): equal to PCA when queries are isotropic,
// and never below PCA in the value-weighted logit share J = sum_k f_k R^2_k it maximises (the
// logit each slice keeps, weighted by the values it carries), on held-out (query, key) pairs of
// a synthetic case and of the shipped tiny model.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "common/scratch_dir.hpp"
#include "calibration/calibrate.hpp"
#include "calibration/qk_basis.hpp"
#include "calibration/synthetic.hpp"
#include "io/byte_text.hpp"
#include "io/capture.hpp"
#include "io/checkpoint.hpp"
#include "io/fingerprint.hpp"
#include "io/mla_weights.hpp"
#include "model/test_fixtures.hpp"

using namespace mla;
using namespace mla::calib;
namespace fs = std::filesystem;

namespace {

const std::vector<int> kGroups = {2, 4, 8};

// A random orthogonal matrix (QR of a Gaussian matrix, seeded).
MatrixR random_orthogonal(int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0, 1);
  Eigen::MatrixXd a(d, d);
  for (int64_t i = 0; i < a.size(); ++i) a.data()[i] = n(rng);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  return qr.householderQ();
}

// Covariance R diag(scales) R^T.
MatrixR covariance(const MatrixR& R, const VectorD& scales) { return R * scales.asDiagonal() * R.transpose(); }

// Samples [n, d] of N(0, C).
MatrixR samples(const MatrixR& C, int64_t n, uint64_t seed) {
  const Eigen::LLT<Eigen::MatrixXd> llt(C);
  const Eigen::MatrixXd L = llt.matrixL();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  MatrixR x(n, C.rows());
  for (int64_t i = 0; i < n; ++i) {
    Eigen::VectorXd z(C.rows());
    for (int64_t j = 0; j < z.size(); ++j) z(j) = g(rng);
    x.row(i) = (L * z).transpose();
  }
  return x;
}

// J_g = sum_k f_k R^2_k measured on pairs (q_i, u_i): f_k from the keys, R^2_k the squared
// correlation (through the origin, as mu is fitted) of the slice's partial logit with z.
double empirical_j(const MatrixR& q, const MatrixR& u, const Eigen::MatrixXd& U, int g) {
  const MatrixR qb = q * U, ub = u * U;
  const int64_t w = U.cols() / g;
  const VectorD z = (qb.cwiseProduct(ub)).rowwise().sum();
  const double zz = z.squaredNorm(), uu = ub.squaredNorm();
  double j = 0;
  for (int k = 0; k < g; ++k) {
    const VectorD p = (qb.middleCols(k * w, w).cwiseProduct(ub.middleCols(k * w, w))).rowwise().sum();
    const double f = ub.middleCols(k * w, w).squaredNorm() / uu;
    const double zp = z.dot(p), pp = p.squaredNorm();
    j += pp > 0 ? f * zp * zp / (pp * zz) : 0.0;
  }
  return j;
}

}  // namespace

TEST(QkBasis, EqualsPcaWhenQueriesAreIsotropic) {
  const int64_t d = 64;
  VectorD scales(d);
  for (int64_t i = 0; i < d; ++i) scales(i) = std::pow(0.9, static_cast<double>(i));
  const MatrixR mu = covariance(random_orthogonal(d, 3), scales);
  const Eigen_ pca = symmetric_eigen(mu);
  const QkFit fit = fit_qk_basis(mu, 2.5 * MatrixR::Identity(d, d), pca.vectors, kGroups);
  EXPECT_EQ(fit.rotations, 0);
  EXPECT_EQ((fit.basis - pca.vectors).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_DOUBLE_EQ(fit.objective, fit.objective_start);
}

TEST(QkBasis, CalibrationWithoutQueriesGivesThePcaBasis) {
  // A latent capture has no h, hence no queries: M_q = I and qk must be PCA's basis.
  model::MlaConfig cfg = model::test_config_v2_style();
  cfg.kv_lora_rank = 64;
  const mla::test::ScratchDir scratch("mla_qk_test");
  const fs::path dir = scratch.path();
  SyntheticCaptureSpec spec;
  spec.sequences = 10;
  spec.seq_len = 64;
  for (int64_t i = 0; i < 64; ++i) spec.channel_scale.push_back(std::pow(0.93, static_cast<double>(i)));
  write_synthetic_capture((dir / "lat.h5").string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {(dir / "lat.h5").string()};
  const auto r = calibrate(
      cfg,
      [&](int64_t) {
        model::AttentionWeights w;
        w.kv_a_layernorm = VectorD::Ones(cfg.kv_lora_rank);
        return w;
      },
      "fp", opt);
  const auto& L = r.layers[0];
  EXPECT_EQ(L.qk_queries, 0);
  EXPECT_EQ((L.qk_basis - L.pca_basis).cwiseAbs().maxCoeff(), 0.0);
}

TEST(QkBasis, NeverBelowPcaOnHeldOutSyntheticPairs) {
  // Keys and queries with different principal axes: PCA follows the keys alone.
  const int64_t d = 64, n_fit = 20000, n_hold = 20000;
  VectorD su(d), sq(d);
  for (int64_t i = 0; i < d; ++i) {
    su(i) = std::pow(0.92, static_cast<double>(i));
    sq(i) = std::pow(0.85, static_cast<double>(d - 1 - i)) + 0.05;
  }
  const MatrixR Cu = covariance(random_orthogonal(d, 11), su);
  const MatrixR Cq = covariance(random_orthogonal(d, 12), sq);
  const MatrixR u_fit = samples(Cu, n_fit, 1), q_fit = samples(Cq, n_fit, 2);
  const MatrixR u_hold = samples(Cu, n_hold, 3), q_hold = samples(Cq, n_hold, 4);
  const MatrixR mu = u_fit.transpose() * u_fit / static_cast<double>(n_fit);
  const MatrixR mq = q_fit.transpose() * q_fit / static_cast<double>(n_fit);
  const Eigen_ pca = symmetric_eigen(mu);
  const QkFit fit = fit_qk_basis(mu, mq, pca.vectors, kGroups);
  EXPECT_GT(fit.rotations, 0);
  EXPECT_GT(fit.objective, fit.objective_start);
  EXPECT_LT((fit.basis.transpose() * fit.basis - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff(), 1e-10);
  for (int g : kGroups) {
    const double j_pca = empirical_j(q_hold, u_hold, pca.vectors, g);
    const double j_qk = empirical_j(q_hold, u_hold, fit.basis, g);
    EXPECT_GE(j_qk, j_pca) << "g = " << g;
    std::printf("[figure] synthetic g=%d held-out J: pca %.4f, qk %.4f\n", g, j_pca, j_qk);
  }
}

TEST(QkBasis, NeverBelowPcaOnHeldOutPairsOfTheTinyModel) {
  // tiny-v2, a capture of this repository's docs as text: every layer's held-out J per g.
  const fs::path ckpt_dir = fs::path(MLA_SOURCE_DIR) / "datasets" / "tiny-v2";
  const io::Checkpoint ckpt = io::Checkpoint::open(ckpt_dir);
  const model::DenseModel m = io::load_dense_model(ckpt);
  const auto bytes = io::read_bytes(fs::path(MLA_SOURCE_DIR) / "docs" / "calibration.md");
  const auto windows = io::byte_windows(bytes, 96, 30);
  ASSERT_EQ(windows.size(), 30u);
  const mla::test::ScratchDir scratch("mla_qk_tiny");
  const fs::path dir = scratch.path();
  io::CaptureMeta meta;
  meta.model_type = ckpt.config().model_type;
  meta.num_layers = ckpt.config().num_hidden_layers;
  meta.hidden_size = ckpt.config().hidden_size;
  meta.source = "docs/calibration.md";
  io::write_dense_capture(m, meta, {{"calib", windows, false}}, dir / "cap.h5");
  CalibrationOptions opt;
  opt.captures = {(dir / "cap.h5").string()};
  opt.holdout_fraction = 0.3;
  const auto r = calibrate(ckpt.config(), [&](int64_t l) { return io::load_attention_weights(ckpt, l); }, "", opt);
  // Where both bases keep nearly all of the logit (J ~ 0.999 at g = 2 in the first layers) the
  // held-out values agree to ~3e-6 and either may be ahead: that is the resolution of 9 held-out
  // sequences, not a loss. The sum over g must improve strictly.
  constexpr double kSaturatedTie = 1e-5;
  for (const auto& L : r.layers) {
    ASSERT_TRUE(L.have_pairs);
    EXPECT_GT(L.qk_queries, 0);
    EXPECT_GE(L.qk_objective, L.qk_objective_pca);
    double sum_pca = 0, sum_qk = 0;
    for (int g : kGroups) {
      double j_pca = 0, j_qk = 0;
      for (int k = 0; k < g; ++k) {
        j_pca += L.slices.at(g).at("pca").f_holdout[k] * L.slices.at(g).at("pca").r2[k];
        j_qk += L.slices.at(g).at("qk").f_holdout[k] * L.slices.at(g).at("qk").r2[k];
      }
      EXPECT_GE(j_qk, j_pca - kSaturatedTie) << "layer " << L.layer << " g " << g;
      sum_pca += j_pca;
      sum_qk += j_qk;
      std::printf("[figure] tiny-v2 layer %lld g=%d held-out J: pca %.4f, qk %.4f\n", static_cast<long long>(L.layer),
                  g, j_pca, j_qk);
    }
    EXPECT_GT(sum_qk, sum_pca) << "layer " << L.layer;
  }
}
