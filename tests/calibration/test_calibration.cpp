// Known answers of mla-calibrate: Hadamard f_k on isotropic data, PCA on a known
// covariance, the FP4 constant on Gaussian groups, determinism, and the input errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <random>

#include "common/scratch_dir.hpp"
#include "calibration/calibrate.hpp"
#include "calibration/synthetic.hpp"
#include "core/error.hpp"
#include "io/calib_file.hpp"
#include "io/capture.hpp"
#include "io/hdf5.hpp"
#include "model/test_fixtures.hpp"
#include "quant/fp4_kv.hpp"

using namespace mla;
using namespace mla::calib;
using io::classify_h5_float_type;  // the capture element types live with the capture reader
using io::IoMode;
using io::make_bf16_h5_type;
using io::stored_type_name;
using io::StoredType;
namespace fs = std::filesystem;

namespace {
constexpr double kIsotropicTol = 0.01;  // required: f_k within 1% of 1/g

fs::path tmpdir() { return mla::test::process_scratch_dir("mla_calib_test"); }

model::MlaConfig cfg64() {  // d_c = 64 so the latent statistics are cheap but not trivial
  model::MlaConfig c = model::test_config_v2_style();
  c.kv_lora_rank = 64;
  return c;
}

WeightsProvider gamma_one(const model::MlaConfig& cfg) {
  return [cfg](int64_t) {
    model::AttentionWeights w;
    w.kv_a_layernorm = VectorD::Ones(cfg.kv_lora_rank);
    w.kv_b_proj = MatrixR::Zero(cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank);
    return w;
  };
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
}  // namespace

TEST(Calibration, HadamardEnergyFractionsAreUniformOnIsotropicData) {
  const auto cfg = cfg64();
  const fs::path cap = tmpdir() / "iso.h5";
  SyntheticCaptureSpec spec;
  spec.sequences = 40; spec.seq_len = 512;
  write_synthetic_capture(cap.string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {cap.string()};
  const auto r = calibrate(cfg, gamma_one(cfg), "fp", opt);
  ASSERT_EQ(r.layers.size(), 1u);
  for (int g : {2, 4, 8}) {
    const auto& f = r.layers[0].slices.at(g).at("hadamard").f;
    double sum = 0;
    for (double v : f) { EXPECT_NEAR(v, 1.0 / g, kIsotropicTol / g) << "g=" << g; sum += v; }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  EXPECT_FALSE(r.layers[0].have_pairs);  // latent capture: no queries
}

TEST(Calibration, PcaRecoversKnownDiagonalCovariance) {
  const auto cfg = cfg64();
  const fs::path cap = tmpdir() / "aniso.h5";
  SyntheticCaptureSpec spec;
  spec.sequences = 20; spec.seq_len = 256;
  // Channel scales in a scrambled order: PCA must sort them (descending) back.
  std::vector<double> sc(64);
  for (int i = 0; i < 64; ++i) sc[(i * 37) % 64] = std::pow(0.9, i);
  spec.channel_scale = sc;
  write_synthetic_capture(cap.string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {cap.string()};
  const auto r = calibrate(cfg, gamma_one(cfg), "fp", opt);
  const auto& L = r.layers[0];
  for (int i = 0; i < 64; ++i) {
    // The i-th principal axis is the channel with the i-th largest scale.
    const int ch = (i * 37) % 64;
    EXPECT_GT(std::fabs(L.pca_basis(ch, i)), 0.95) << "axis " << i;
    if (i) {
      EXPECT_LE(L.eigenvalues[i], L.eigenvalues[i - 1]);
    }
  }
  // PCA puts more energy in the first slice than the identity basis does.
  EXPECT_GT(L.slices.at(2).at("pca").f[0], L.slices.at(2).at("identity").f[0] + 0.1);
  EXPECT_GT(L.slices.at(2).at("pca").f_holdout[0], 0.5);
}

TEST(Calibration, Fp4ConstantOnGaussianGroups) {
  std::mt19937_64 rng(77);
  std::normal_distribution<float> nd;
  std::vector<float> x(32 * 4096);
  for (auto& v : x) v = nd(rng);
  const auto f = fit_fp4_constant(x);
  EXPECT_NEAR(f.c_continuous, 0.16, 0.012);
  EXPECT_GT(std::fabs(f.c_rounded - f.c_continuous), 0.005);
  EXPECT_LT(f.mse_rounded, f.mse_rounded_paper);
  EXPECT_LE(f.mse_continuous, f.mse_rounded);  // the rounded scale is a constrained version
}

TEST(Calibration, HiddenCaptureGivesMuR2AndFp8StudyAndIsDeterministic) {
  const auto cfg = model::test_config_v2_style();
  const auto w = model::random_attention_weights(cfg, 5);
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 10; spec.seq_len = 64; spec.latent = false;
  write_synthetic_capture((dir / "h.h5").string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {(dir / "h.h5").string()};
  opt.mu_per_head = true;
  const auto r = calibrate(cfg, [&](int64_t) { return w; }, "fp", opt);
  const auto& L = r.layers[0];
  ASSERT_TRUE(L.have_pairs);
  EXPECT_GT(L.pairs_holdout, 0);
  // identity/pca slices of a full-rank latent: mu finite, held-out R^2 <= 1.
  for (const auto& b : basis_names()) {
    for (int k = 0; k < 2; ++k) {
      EXPECT_TRUE(std::isfinite(L.slices.at(2).at(b).mu[k]));
      EXPECT_LE(L.slices.at(2).at(b).r2[k], 1.0);
    }
  }
  ASSERT_EQ(L.fp8.size(), 5u);
  for (const auto& [n, m] : L.fp8) {
    EXPECT_GT(m.rel_l2, 0.0) << n;   // FP8 is lossy
    EXPECT_LT(m.rel_l2, 0.2) << n;
  }
  write_calib_h5(r, (dir / "a.h5").string());
  const auto r2 = calibrate(cfg, [&](int64_t) { return w; }, "fp", opt);
  write_calib_h5(r2, (dir / "b.h5").string());
  EXPECT_EQ(slurp(dir / "a.h5"), slurp(dir / "b.h5"));
  for (const auto& e : fs::directory_iterator(dir))  // no temporary of the atomic writes is left
    EXPECT_FALSE(e.path().filename().string().starts_with(".")) << e.path();
  auto f = io::h5::File::open_read(dir / "a.h5");
  EXPECT_EQ(f.root().attr_string("schema"), io::kCalibSchema);
  EXPECT_EQ(f.root().attr_int("hadamard_seed"), static_cast<int64_t>(opt.hadamard_seed));
  io::h5::Dims d;
  f.root().read<double>("layer_00/g4/pca/energy_fraction", &d);
  EXPECT_EQ(d, io::h5::Dims{4});
}

TEST(Calibration, ClearErrors) {
  const auto cfg = cfg64();
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 4; spec.seq_len = 16;
  write_synthetic_capture((dir / "few.h5").string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {(dir / "few.h5").string()};
  // 48 fitting tokens < 4 * 64.
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) { EXPECT_NE(std::string(e.what()).find("4 x d_c"), std::string::npos); }
  // Layer count mismatch.
  spec.num_layers = 3;
  write_synthetic_capture((dir / "l3.h5").string(), cfg, spec);
  opt.captures = {(dir / "l3.h5").string()};
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) { EXPECT_NE(std::string(e.what()).find("num_layers = 3"), std::string::npos); }
  // Width mismatch: a capture made for d_c = 32 read as d_c = 64.
  spec.num_layers = 1;
  write_synthetic_capture((dir / "w.h5").string(), model::test_config_v2_style(), spec);
  opt.captures = {(dir / "w.h5").string()};
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) { EXPECT_NE(std::string(e.what()).find("latent has shape [4, 16, 32]"), std::string::npos) << e.what(); }
  // A NaN in layer 0, sequence 2, token 5.
  {
  }
  {
    // Rewrite one row with a NaN through a fresh file built the same way.
    auto f = io::h5::File::create(dir / "nan2.h5");
    auto& r = f.root();
    r.set_attr("schema", "mla-capture/1");
    r.set_attr("num_layers", int64_t{1});
    r.set_attr("hidden_size", cfg.hidden_size);
    std::vector<int32_t> tok(4 * 16, 1);
    r.write<int32_t>("calib/tokens", {4, 16}, tok.data());
    std::vector<float> lat(4 * 16 * 64, 1.0f), kpe(4 * 16 * 8, 0.0f);
    lat[(2 * 16 + 5) * 64 + 7] = NAN;
    r.write<float>("calib/layer_00/latent", {4, 16, 64}, lat.data());
    r.write<float>("calib/layer_00/k_pe", {4, 16, 8}, kpe.data());
  }
  opt.captures = {(dir / "nan2.h5").string()};
  opt.allow_few_tokens = true;
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer_00/latent sequence 2 token 5"), std::string::npos) << m;
    EXPECT_NE(m.find("NaN"), std::string::npos) << m;
  }
  // Empty capture.
  {
    auto f = io::h5::File::create(dir / "empty.h5");
    auto& r = f.root();
    r.set_attr("schema", "mla-capture/1");
    r.set_attr("num_layers", int64_t{1});
    r.set_attr("hidden_size", cfg.hidden_size);
    r.write<int32_t>("calib/tokens", {0, 16}, static_cast<const int32_t*>(nullptr));
  }
  opt.captures = {(dir / "empty.h5").string()};
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) { EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what(); }
}

// ---- RowReservoir::merge and merged captures ----

namespace {
// A reservoir of width-1 rows fed 0, 1, ..., n-1 (+ offset).
RowReservoir fed(int64_t cap, int64_t n, float offset, uint64_t seed) {
  RowReservoir r(cap, 1, seed);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = r.offer_slot();
    const double v = offset + static_cast<double>(i);
    if (slot >= 0) r.store(slot, &v);
  }
  return r;
}
}  // namespace

TEST(RowReservoir, MergeUnderCapacityKeepsTheUnion) {
  RowReservoir a = fed(10, 3, 0, 1);
  const RowReservoir b = fed(10, 4, 100, 2);
  a.merge(b);
  EXPECT_EQ(a.seen, 7);
  ASSERT_EQ(a.size(), 7);
  std::vector<float> got = a.rows;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<float>{0, 1, 2, 100, 101, 102, 103}));
  // Merging an empty reservoir changes nothing; merging into an empty one copies.
  const RowReservoir empty(10, 1, 3);
  a.merge(empty);
  EXPECT_EQ(a.size(), 7);
  RowReservoir e2(10, 1, 4);
  e2.merge(a);
  EXPECT_EQ(e2.size(), 7);
  EXPECT_EQ(e2.seen, 7);
}

TEST(RowReservoir, MergeIsProportionalAndUniform) {
  // A saw 900 rows, B 100: a merged sample of 64 takes ~90% from A (hypergeometric mean 57.6),
  // and A's rows are a uniform sample of 0..899 (mean 449.5).
  double from_a = 0, mean_a = 0;
  int64_t n_a = 0;
  const int trials = 300;
  for (int k = 0; k < trials; ++k) {
    RowReservoir a = fed(64, 900, 0, 10 + k);
    a.merge(fed(64, 100, 10000, 5000 + k));
    ASSERT_EQ(a.size(), 64);
    EXPECT_EQ(a.seen, 1000);
    for (float v : a.rows) {
      if (v < 10000) { from_a += 1; mean_a += v; ++n_a; }
    }
  }
  EXPECT_NEAR(from_a / trials, 57.6, 1.0);
  EXPECT_NEAR(mean_a / static_cast<double>(n_a), 449.5, 12.0);
}

TEST(RowReservoir, MergeDoesNotFavourEarlySlots) {
  // Barely-full reservoirs (80 rows into 64 slots) hold row i in slot i with probability ~0.8,
  // so taking a prefix of the slots would give a mean near 27 instead of the uniform 39.5.
  double sum = 0;
  int64_t n = 0;
  for (int k = 0; k < 300; ++k) {
    RowReservoir a = fed(64, 80, 0, 100 + k);
    a.merge(fed(64, 80, 10000, 9000 + k));
    for (float v : a.rows)
      if (v < 10000) { sum += v; ++n; }
  }
  EXPECT_NEAR(sum / static_cast<double>(n), 39.5, 2.5);
}

TEST(Calibration, SeveralCapturesMergeIntoOneCalibration) {
  const auto cfg = cfg64();
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 10; spec.seq_len = 64;
  std::vector<double> sc(64);
  for (int i = 0; i < 64; ++i) sc[i] = 1.0 + 0.05 * i;
  spec.channel_scale = sc;
  spec.seed = 1;
  write_synthetic_capture((dir / "ma.h5").string(), cfg, spec);
  spec.seed = 2;
  spec.sequences = 20;
  std::reverse(sc.begin(), sc.end());  // a different covariance, so the merge weights matter
  spec.channel_scale = sc;
  write_synthetic_capture((dir / "mb.h5").string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {(dir / "ma.h5").string()};
  const auto ra = calibrate(cfg, gamma_one(cfg), "fp", opt);
  opt.captures = {(dir / "mb.h5").string()};
  const auto rb = calibrate(cfg, gamma_one(cfg), "fp", opt);
  opt.captures = {(dir / "ma.h5").string(), (dir / "mb.h5").string()};
  const auto rm = calibrate(cfg, gamma_one(cfg), "fp", opt);
  const auto &A = ra.layers[0], &B = rb.layers[0], &M = rm.layers[0];
  // Held-out = last 10% of the sequences of each capture: 1 of 10, 2 of 20.
  EXPECT_EQ(A.tokens_fit, 9 * 64);
  EXPECT_EQ(B.tokens_fit, 18 * 64);
  EXPECT_EQ(M.tokens_fit, A.tokens_fit + B.tokens_fit);
  EXPECT_EQ(M.tokens_holdout, A.tokens_holdout + B.tokens_holdout);
  const MatrixR want = (static_cast<double>(A.tokens_fit) * A.second_moment +
                        static_cast<double>(B.tokens_fit) * B.second_moment) /
                       static_cast<double>(A.tokens_fit + B.tokens_fit);
  EXPECT_LT((M.second_moment - want).cwiseAbs().maxCoeff(), 1e-6);
  EXPECT_GT((A.second_moment - B.second_moment).cwiseAbs().maxCoeff(), 0.1);  // the test can fail
  ASSERT_EQ(rm.capture_sources.size(), 2u);
  EXPECT_EQ(M.sample.size(), 0u);  // released after the global fits
  EXPECT_GT(M.fp4.c_rounded, 0.0);
}

TEST(Calibration, OutputDoesNotDependOnThreadCount) {
  auto cfg = cfg64();
  cfg.num_hidden_layers = 3;
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 10; spec.seq_len = 64; spec.num_layers = 3;
  write_synthetic_capture((dir / "thr.h5").string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {(dir / "thr.h5").string()};
  opt.threads = 1;
  const auto r1 = calibrate(cfg, gamma_one(cfg), "fp", opt);
  // The default (auto) moment is float32 below kAutoBf16Tokens fitting tokens.
  EXPECT_EQ(r1.second_moment_accumulation.rfind("float32 ssyrk", 0), 0u) << r1.second_moment_accumulation;
  write_calib_h5(r1, (dir / "t1.h5").string());
  opt.threads = 2;
  write_calib_h5(calibrate(cfg, gamma_one(cfg), "fp", opt), (dir / "t2.h5").string());
  EXPECT_EQ(slurp(dir / "t1.h5"), slurp(dir / "t2.h5"));
  opt.moment = MomentMode::BF16;  // and the BF16 path
  opt.threads = 1;
  write_calib_h5(calibrate(cfg, gamma_one(cfg), "fp", opt), (dir / "b1.h5").string());
  opt.threads = 2;
  write_calib_h5(calibrate(cfg, gamma_one(cfg), "fp", opt), (dir / "b2.h5").string());
  EXPECT_EQ(slurp(dir / "b1.h5"), slurp(dir / "b2.h5"));
  EXPECT_NE(slurp(dir / "b1.h5"), slurp(dir / "t1.h5"));
}

TEST(Calibration, InfInKPeIsNamed) {
  const auto cfg = cfg64();
  const fs::path dir = tmpdir();
  {
    auto f = io::h5::File::create(dir / "inf.h5");
    auto& r = f.root();
    r.set_attr("schema", "mla-capture/1");
    r.set_attr("num_layers", int64_t{1});
    r.set_attr("hidden_size", cfg.hidden_size);
    std::vector<int32_t> tok(4 * 16, 1);
    r.write<int32_t>("calib/tokens", {4, 16}, tok.data());
    std::vector<float> lat(4 * 16 * 64, 1.0f), kpe(4 * 16 * cfg.qk_rope_head_dim, 0.0f);
    kpe[(3 * 16 + 9) * cfg.qk_rope_head_dim + 1] = -INFINITY;
    r.write<float>("calib/layer_00/latent", {4, 16, 64}, lat.data());
    r.write<float>("calib/layer_00/k_pe", {4, 16, static_cast<uint64_t>(cfg.qk_rope_head_dim)}, kpe.data());
  }
  CalibrationOptions opt;
  opt.captures = {(dir / "inf.h5").string()};
  opt.allow_few_tokens = true;
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer_00/k_pe sequence 3 token 9 column 1 is Inf"), std::string::npos) << m;
  }
}

TEST(Calibration, Float32MomentWithinToleranceOfFloat64) {
  // The float32 block second moment against a direct float64 sum over the capture:
  // docs/calibration.md promises |dM| <= 1e-6 max|M|; --exact-moment matches to rounding.
  const auto cfg = cfg64();
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 10; spec.seq_len = 512;
  std::vector<double> sc(64);
  for (int i = 0; i < 64; ++i) sc[i] = std::pow(0.93, i);
  spec.channel_scale = sc;
  write_synthetic_capture((dir / "prec.h5").string(), cfg, spec);
  std::vector<float> lat;
  {
    auto f = io::h5::File::open_read(dir / "prec.h5");
    lat = f.root().open("calib/layer_00/latent").read_rows<float>(0, 9);  // the 9 fitting sequences
  }
  MatrixR want = MatrixR::Zero(64, 64);
  const int64_t n = static_cast<int64_t>(lat.size()) / 64;
  for (int64_t t = 0; t < n; ++t) {
    Eigen::RowVectorXd u(64);
    for (int i = 0; i < 64; ++i) u(i) = lat[static_cast<std::size_t>(t * 64 + i)];
    u /= std::sqrt(u.squaredNorm() / 64.0 + cfg.rms_norm_eps);
    want += u.transpose() * u;
  }
  want /= static_cast<double>(n);
  CalibrationOptions opt;
  opt.captures = {(dir / "prec.h5").string()};
  opt.moment = MomentMode::F32;
  const auto f32 = calibrate(cfg, gamma_one(cfg), "fp", opt);
  opt.moment = MomentMode::F64;
  const auto f64 = calibrate(cfg, gamma_one(cfg), "fp", opt);
  const double scale = want.cwiseAbs().maxCoeff();
  const double e32 = (f32.layers[0].second_moment - want).cwiseAbs().maxCoeff() / scale;
  const double e64 = (f64.layers[0].second_moment - want).cwiseAbs().maxCoeff() / scale;
  EXPECT_LT(e32, 1e-6);
  EXPECT_GT(e32, 0.0);  // it is float32: if this were 0 the test would not test the tolerance
  EXPECT_LT(e64, 1e-13);
  EXPECT_NE(f32.second_moment_accumulation, f64.second_moment_accumulation);
  for (int g : {2, 4, 8})
    for (const auto& b : basis_names())
      for (int k = 0; k < g; ++k)
        EXPECT_NEAR(f32.layers[0].slices.at(g).at(b).f[k], f64.layers[0].slices.at(g).at(b).f[k], 1e-6);
}

TEST(Calibration, HiddenCaptureWithoutProjectionWeightsIsAnInputError) {
  // A capture holding h needs kv_a_proj_with_mqa (mla-calibrate --model); with --config only
  // (gamma = 1, no projections) it must fail clearly, not read garbage.
  const auto cfg = model::test_config_v2_style();
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 4; spec.seq_len = 16; spec.latent = false;
  write_synthetic_capture((dir / "h_noweights.h5").string(), cfg, spec);
  CalibrationOptions opt;
  opt.captures = {(dir / "h_noweights.h5").string()};
  opt.allow_few_tokens = true;
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_a_proj_with_mqa"), std::string::npos) << e.what();
  }
}

// ---- bfloat16 captures, the BF16 second moment, the readers ----

namespace {
// Direct float64 E[u u^T] over the first `seqs` sequences of a latent capture (read through
// HDF5's own conversion, so a bfloat16 file is widened independently of the fast path).
MatrixR exact_moment(const fs::path& cap, int64_t seqs, int64_t d, double eps) {
  std::vector<float> lat;
  {
    auto f = io::h5::File::open_read(cap);
    lat = f.root().open("calib/layer_00/latent").read_rows<float>(0, static_cast<uint64_t>(seqs));
  }
  MatrixR want = MatrixR::Zero(d, d);
  const int64_t n = static_cast<int64_t>(lat.size()) / d;
  for (int64_t t = 0; t < n; ++t) {
    Eigen::RowVectorXd u(d);
    for (int64_t i = 0; i < d; ++i) u(i) = lat[static_cast<std::size_t>(t * d + i)];
    u /= std::sqrt(u.squaredNorm() / static_cast<double>(d) + eps);
    want += u.transpose() * u;
  }
  return want / static_cast<double>(n);
}

// Largest sine of the principal angles between the column spans of A and B (orthonormal).
double subspace_sin(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) {
  const Eigen::VectorXd s = Eigen::JacobiSVD<Eigen::MatrixXd>(A.transpose() * B).singularValues();
  const double c = std::min(1.0, s.minCoeff());
  return std::sqrt(std::max(0.0, 1.0 - c * c));
}

// The BF16 moment's tolerances on the test capture below (d_c = 64, 4608 fit tokens, channel
// scales 0.93^i). Every product a_t b_t carries one zero-mean rounding of relative size
// <= 2^-9 (b_t to bfloat16; a float32 capture rounds a_t too), so the error of an entry
// averages down as 1/sqrt(tokens) when the rows differ: measured 8e-5 of max|M| here on a
// float32 capture, 1.0-1.5e-5 on the 1M-token BF16 V2-Lite-shaped captures; rows that repeat
// (tiny-v2 layer 0, a function of ~100 distinct bytes) do not average: 1.7e-3 there
// (docs/calibration.md). The tolerances are 3-5x the values measured on this capture.
constexpr double kBf16MomentRelTol = 2.5e-4;    // max|dM| / max|M|
constexpr double kBf16EnergyFractionTol = 3e-5; // |df_k|, every g, basis, slice
constexpr double kBf16EigenRelTol = 2.5e-4;     // max|d lambda| / lambda_max
constexpr double kBf16SubspaceSinTol = 2e-3;    // PCA slice subspaces, largest principal-angle sine
constexpr double kPortableVsKernelTol = 1e-6;   // AVX-512 BF16 kernel vs the sgemm path (same products)

SyntheticCaptureSpec decaying_spec(StoredType dtype) {
  SyntheticCaptureSpec spec;
  spec.sequences = 10; spec.seq_len = 512;
  spec.channel_scale.resize(64);
  for (int i = 0; i < 64; ++i) spec.channel_scale[i] = std::pow(0.93, i);
  spec.dtype = dtype;
  return spec;
}
}  // namespace

TEST(Calibration, Bf16MomentWithinNamedTolerancesOfFloat64) {
  const auto cfg = cfg64();
  const fs::path dir = tmpdir();
  for (StoredType dtype : {StoredType::F32, StoredType::BF16}) {
    const fs::path cap = dir / (dtype == StoredType::BF16 ? "mbf.h5" : "mf.h5");
    write_synthetic_capture(cap.string(), cfg, decaying_spec(dtype));
    const MatrixR want = exact_moment(cap, 9, 64, cfg.rms_norm_eps);
    CalibrationOptions opt;
    opt.captures = {cap.string()};
    opt.moment = MomentMode::F64;
    const auto ref = calibrate(cfg, gamma_one(cfg), "fp", opt);
    opt.moment = MomentMode::BF16;
    const auto bf = calibrate(cfg, gamma_one(cfg), "fp", opt);
    const auto &R = ref.layers[0], &B = bf.layers[0];
    const double scale = want.cwiseAbs().maxCoeff();
    EXPECT_LT((R.second_moment - want).cwiseAbs().maxCoeff() / scale, 1e-13);  // the reference is exact
    const double e = (B.second_moment - want).cwiseAbs().maxCoeff() / scale;
    std::printf("bf16 moment, %s capture: max|dM|/max|M| %.3g, max|d lambda|/lambda_max %.3g\n", stored_type_name(dtype), e,
                (B.eigenvalues - R.eigenvalues).cwiseAbs().maxCoeff() / R.eigenvalues(0));
    EXPECT_LT(e, kBf16MomentRelTol) << stored_type_name(dtype);
    EXPECT_GT(e, 1e-8) << "bf16 products are lossy: an exact result means the bf16 path did not run";
    EXPECT_LT((B.eigenvalues - R.eigenvalues).cwiseAbs().maxCoeff() / R.eigenvalues(0), kBf16EigenRelTol);
    for (int g : {2, 4, 8}) {
      for (const auto& b : basis_names())
        for (int k = 0; k < g; ++k)
          EXPECT_NEAR(B.slices.at(g).at(b).f[k], R.slices.at(g).at(b).f[k], kBf16EnergyFractionTol) << g << b << k;
      const int w = 64 / g;
      double worst_sin = 0, worst_df = 0;
      for (int k = 0; k < g; ++k) {
        const double sn = subspace_sin(R.pca_basis.middleCols(k * w, w), B.pca_basis.middleCols(k * w, w));
        worst_sin = std::max(worst_sin, sn);
        for (const auto& b : basis_names())
          worst_df = std::max(worst_df, std::fabs(B.slices.at(g).at(b).f[k] - R.slices.at(g).at(b).f[k]));
        EXPECT_LT(sn, kBf16SubspaceSinTol) << "g=" << g << " slice " << k;
      }
      std::printf("  g=%d: max |df| %.3g, PCA slice subspace sin %.3g\n", g, worst_df, worst_sin);
    }
    EXPECT_NE(bf.second_moment_accumulation, ref.second_moment_accumulation);
    // The portable path (sgemm of the same bfloat16 operands) agrees with the kernel.
    SecondMoment::use_portable_bf16(true);
    const auto port = calibrate(cfg, gamma_one(cfg), "fp", opt);
    SecondMoment::use_portable_bf16(false);
    EXPECT_LT((port.layers[0].second_moment - B.second_moment).cwiseAbs().maxCoeff() / scale, kPortableVsKernelTol);
  }
}

TEST(Calibration, Bf16MomentKernelOnOddRowCountsAndLongSequences) {
  // Odd token counts (the last pair half-empty), rows beyond one 4096-row block, d_c = 512.
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd;
  for (auto [rows, d] : {std::pair<int64_t, int>{1, 512}, {7, 512}, {33, 96}, {4097, 64}}) {
    std::vector<uint16_t> c(static_cast<std::size_t>(rows * d));
    for (auto& v : c) v = float_to_bf16(nd(rng));
    MatrixR want = MatrixR::Zero(d, d);
    for (int64_t t = 0; t < rows; ++t) {
      Eigen::RowVectorXd u(d);
      for (int i = 0; i < d; ++i) u(i) = bf16_to_float(c[static_cast<std::size_t>(t * d + i)]);
      u /= std::sqrt(u.squaredNorm() / d + 1e-6);
      want += u.transpose() * u;
    }
    SecondMoment m(d);
    m.collect_bf16(c.data(), StoredType::BF16, rows, 1e-6);
    EXPECT_EQ(m.count, rows);
    const MatrixR got = m.finalize() * static_cast<double>(rows);
    // Per entry: a sum of `rows` products each with a relative rounding <= 2^-9.
    EXPECT_LT((got - want).cwiseAbs().maxCoeff(), 4.0 * std::ldexp(1.0, -9) * want.cwiseAbs().maxCoeff() + 1e-5)
        << rows;
  }
}

TEST(Calibration, Bf16SyntheticCaptureHoldsTheRoundedFloat32Values) {
  const auto cfg = cfg64();
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 3; spec.seq_len = 16;
  write_synthetic_capture((dir / "v32.h5").string(), cfg, spec);
  spec.dtype = StoredType::BF16;
  write_synthetic_capture((dir / "v16.h5").string(), cfg, spec);
  auto a = io::h5::File::open_read(dir / "v32.h5"), b = io::h5::File::open_read(dir / "v16.h5");
  for (const char* ds : {"calib/layer_00/latent", "calib/layer_00/k_pe"}) {
    const auto x = a.root().open(ds).read_rows<float>(0, 3), y = b.root().open(ds).read_rows<float>(0, 3);
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bf16_to_float(float_to_bf16(x[i])), y[i]) << ds << " " << i;
  }
  // The file's type is the self-describing bfloat16 float type (2 bytes, 8-bit exponent).
  StoredType t{};
  const hid_t d = H5Dopen2(b.root().id(), "calib/layer_00/latent", H5P_DEFAULT);
  const hid_t ft = H5Dget_type(d);
  EXPECT_TRUE(classify_h5_float_type(ft, t));
  EXPECT_EQ(t, StoredType::BF16);
  EXPECT_EQ(H5Tget_size(ft), 2u);
  H5Tclose(ft);
  H5Dclose(d);
}

TEST(Calibration, ReadModesAndElementTypesGiveIdenticalOutput) {
  // Direct, page-cache and H5Dread reads give byte-identical calib.h5, for float32 and
  // bfloat16 captures.
  auto cfg = cfg64();
  cfg.num_hidden_layers = 2;
  const fs::path dir = tmpdir();
  for (StoredType dtype : {StoredType::F32, StoredType::BF16}) {
    SyntheticCaptureSpec spec = decaying_spec(dtype);
    spec.num_layers = 2;
    const fs::path cap = dir / "modes.h5";
    write_synthetic_capture(cap.string(), cfg, spec);
    CalibrationOptions opt;
    opt.captures = {cap.string()};
    opt.moment = MomentMode::BF16;
    std::string first;
    for (IoMode io : {IoMode::Direct, IoMode::Buffered, IoMode::Hdf5}) {
      opt.io = io;
      opt.prefetch_depth = io == IoMode::Buffered ? 1 : 3;
      write_calib_h5(calibrate(cfg, gamma_one(cfg), "fp", opt), (dir / "modes_calib.h5").string());
      const std::string got = slurp(dir / "modes_calib.h5");
      if (first.empty()) first = got;
      else EXPECT_EQ(got, first) << "io mode " << static_cast<int>(io) << ", " << stored_type_name(dtype);
    }
  }
}

TEST(Calibration, NonFiniteBf16ValueAndNonFloatDatasetAreNamed) {
  const auto cfg = cfg64();
  const fs::path dir = tmpdir();
  auto make = [&](const fs::path& p, bool integer_latent) {
    auto f = io::h5::File::create(p);
    auto& r = f.root();
    r.set_attr("schema", "mla-capture/1");
    r.set_attr("num_layers", int64_t{1});
    r.set_attr("hidden_size", cfg.hidden_size);
    std::vector<int32_t> tok(4 * 16, 1);
    r.write<int32_t>("calib/tokens", {4, 16}, tok.data());
    auto g = r.require_group("calib/layer_00");
    const hid_t bf = make_bf16_h5_type();
    auto put = [&](const char* name, hsize_t w, float bad_at_s2_t5_c7) {
      std::vector<uint16_t> v(4 * 16 * w, float_to_bf16(1.0f));
      v[(2 * 16 + 5) * w + 7] = float_to_bf16(bad_at_s2_t5_c7);
      hsize_t dims[3] = {4, 16, w}, chunk[3] = {1, 16, w};
      const hid_t sp = H5Screate_simple(3, dims, nullptr), pl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_chunk(pl, 3, chunk);
      const hid_t ds = H5Dcreate2(g.id(), name, bf, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
      H5Dwrite(ds, bf, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      H5Dclose(ds); H5Pclose(pl); H5Sclose(sp);
    };
    if (integer_latent) {
      std::vector<int32_t> v(4 * 16 * 64, 1);
      r.write<int32_t>("calib/layer_00/latent", {4, 16, 64}, v.data());
    } else {
      put("latent", 64, NAN);
    }
    put("k_pe", static_cast<hsize_t>(cfg.qk_rope_head_dim), 0.0f);
    H5Tclose(bf);
  };
  make(dir / "bfnan.h5", false);
  make(dir / "bfint.h5", true);
  CalibrationOptions opt;
  opt.allow_few_tokens = true;
  for (IoMode io : {IoMode::Direct, IoMode::Hdf5}) {
    opt.io = io;
    opt.captures = {(dir / "bfnan.h5").string()};
    try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
    catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("layer_00/latent sequence 2 token 5 column 7 is NaN"), std::string::npos) << m;
    }
  }
  opt.captures = {(dir / "bfint.h5").string()};
  try { calibrate(cfg, gamma_one(cfg), "", opt); FAIL(); }
  catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bfint.h5"), std::string::npos) << m;
    EXPECT_NE(m.find("/calib/layer_00/latent has element type integer"), std::string::npos) << m;
  }
}

TEST(Calibration, CaptureReaderWidensBf16HiddenCaptures) {
  // io::CaptureReader (verify-decode) reads a bfloat16 capture through HDF5's conversion.
  const auto cfg = model::test_config_v2_style();
  const fs::path dir = tmpdir();
  SyntheticCaptureSpec spec;
  spec.sequences = 2; spec.seq_len = 8; spec.latent = false;
  write_synthetic_capture((dir / "h32.h5").string(), cfg, spec);
  spec.dtype = StoredType::BF16;
  write_synthetic_capture((dir / "h16.h5").string(), cfg, spec);
  const io::CaptureReader a(dir / "h32.h5"), b(dir / "h16.h5");
  const auto x = a.hidden("calib", 0, 1), y = b.hidden("calib", 0, 1);
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bf16_to_float(float_to_bf16(x[i])), y[i]) << i;
}

TEST(Calibration, FastFp4ObjectivesMatchTheLibrary) {
  std::mt19937_64 rng(21);
  std::normal_distribution<float> nd;
  std::vector<float> x(32 * 512);
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) { x[i] = 0.0f; x[32 + i] = 1e-30f * nd(rng); x[64 + i] *= 1e4f; }  // zero, tiny, large groups
  for (double c : {0.08, 0.1234, 0.156, 0.197, 0.32}) {
    const double lib_r = quant::fp4_mx_sq_error(x.data(), x.size(), quant::Fp4ScaleRule::Round, static_cast<float>(c));
    const double lib_c = quant::fp4_continuous_sq_error(x.data(), x.size(), c);
    EXPECT_NEAR(fp4_round_sq_error(x.data(), x.size(), static_cast<float>(c)), lib_r, 1e-13 * lib_r) << c;
    EXPECT_NEAR(fp4_continuous_sq_error_fast(x.data(), x.size(), c), lib_c, 1e-13 * lib_c) << c;
  }
}
