#pragma once
// mla-calibrate's library entry: streams captures layer by layer and fits everything SPEC
// section 3 asks for. Two passes per layer:
//   pass 1 (every /calib sequence): second moments of u = c/rms(c) on the fit part and the
//          held-out part (the last `holdout_fraction` of sequences), and bounded reservoirs of
//          Hadamard-rotated cache rows x' (for FP4 and Lloyd-Max);
//   pass 2 (a budget of sequences, spread evenly): RMSNorm slicing error on held-out tokens,
//          and, when the capture holds the attention input h (queries need it), mu / R^2 on
//          (query, key) pairs and the FP8 attention-output study.
// Fitted on the fit part, every slicing error is reported on the held-out part (SPEC 3 guard).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "calibration/fitters.hpp"
#include "calibration/stats.hpp"
#include "io/capture.hpp"
#include "model/attention_reference.hpp"
#include "model/config.hpp"
#include "quant/codebook.hpp"

namespace mla::calib {

// How pass 1 forms the second moment of u = c / rms(c) (docs/calibration.md):
//   BF16: bfloat16 products c x bf16(c / rms^2), float32 block sums, float64 total (AVX-512 BF16
//         dot products: twice the float32 rate; measured error ~1e-5 of max|M| at 1M tokens)
//   F32:  float32 ssyrk of u on blocks of 4096 rows, float64 total (error ~2e-8)
//   F64:  float64 dsyrk (exact to rounding; ~6x the BF16 time)
//   Auto (default): BF16 when the CPU has AVX-512 BF16 and every layer has at least
//         kAutoBf16Tokens fitting tokens (there the moment dominates the run time and the BF16
//         rounding averages out over tokens), else F32.
enum class MomentMode { Auto, BF16, F32, F64 };
inline constexpr int64_t kAutoBf16Tokens = int64_t{1} << 18;
const char* moment_mode_name(MomentMode m);

struct CalibrationOptions {
  std::vector<std::string> captures;       // merged in order
  std::vector<int> groups = {2, 4, 8};     // g values (each must divide d_c and the largest g)
  std::vector<int64_t> layers;             // empty: all
  uint64_t hadamard_seed = 0x4d4c41;       // random +-1 diagonal of the Hadamard basis ("MLA")
  double holdout_fraction = 0.1;
  bool allow_few_tokens = false;           // below 4*d_c fit tokens: warn instead of refusing
  int64_t reservoir_rows = 128;            // rotated cache rows kept per layer and part
  int64_t pair_sequences = 8;              // pass-2 sequences per part (fit, held-out)
  int64_t queries_per_sequence = 8;        // query positions per pass-2 sequence
  double mu_min_rel_energy = 1e-3;         // partial-logit energy floor (fraction of full)
  bool mu_per_head = false;
  int protect_first = 1, protect_last = 1; // layers kept BF16 at either end
  double protect_worst_fraction = 0.1;     // plus this fraction of worst FP4-MSE layers
  MomentMode moment = MomentMode::Auto;    // second-moment arithmetic (pass 1)
  io::IoMode io = io::IoMode::Auto;        // how pass 1 reads latent/hidden rows (io/capture.hpp)
  int prefetch_depth = 4;                  // sequences read ahead per layer worker
  int64_t threads = 0;                     // layer worker threads; 0: all cores (min #layers)
};

struct SliceStats {
  std::vector<double> f;           // energy fractions (fit part)
  std::vector<double> f_holdout;   // same on the held-out part
  std::vector<double> mu, r2;      // r2 on the held-out pairs
  std::vector<int> mu_guarded;     // 1: partial logit too weak, mu kept at 1
  std::vector<double> norm_rel_error;  // held-out RMSNorm slicing error, per slice
  MatrixR mu_per_head;             // [H, g] when requested
  // Held-out content logit each slice keeps: sum z p_k / sum z^2 over (query, key) pairs (the
  // slices' values sum to 1; docs/math.md, "A basis from queries and keys").
  std::vector<double> logit_captured;
};

struct Fp8Metrics {
  double rmse = 0, cos_diff = 0, rel_l2 = 0;
};

struct LayerCalibration {
  int64_t layer = 0;
  int64_t tokens_fit = 0, tokens_holdout = 0;
  MatrixR second_moment;             // E[u u^T], fit part
  VectorD eigenvalues;               // descending
  Eigen::MatrixXd pca_basis;         // columns = eigenvectors
  Eigen::MatrixXd qk_basis;          // Jacobi fit of J = sum_g sum_k f_k R^2_k from PCA (qk_basis.hpp)
  double qk_objective_pca = 0, qk_objective = 0;  // J on the fitting moments: PCA, qk
  int64_t qk_rotations = 0;
  int64_t qk_queries = 0;            // query vectors (positions x heads) in M_q; 0: M_q = I (= PCA)
  std::map<int, std::map<std::string, SliceStats>> slices;  // g -> basis name -> stats
  bool have_pairs = false;           // mu and FP8 computed (capture holds h)
  int64_t pairs_fit = 0, pairs_holdout = 0, fp8_queries = 0;
  std::map<std::string, Fp8Metrics> fp8;  // config name -> metrics
  Fp4ConstantFit fp4;                // fitted on the fit reservoir
  double fp4_holdout_rel_mse = 0;    // held-out MSE / E[x^2] at the fitted rounded constant
  quant::Codebook codebook;          // Lloyd-Max on the fit reservoir
  double codebook_holdout_mse = 0;
  std::vector<float> sample;         // fit reservoir (kept for the global fits; not written)
  bool protect = false;
  std::string protect_reason;
};

struct CalibrationResult {
  std::string checkpoint_fingerprint;
  std::string model_type;
  int64_t d_c = 0, num_heads = 0;
  std::vector<std::string> capture_sources, corpus_sha256;
  uint64_t hadamard_seed = 0;
  double holdout_fraction = 0;
  std::string second_moment_accumulation;  // provenance: how the moment was summed (MomentMode)
  std::vector<int> groups;
  std::vector<LayerCalibration> layers;
  Fp4ConstantFit global_fp4;
  quant::Codebook global_codebook;
  quant::Codebook analytic_gaussian_unit, analytic_gaussian_1_over_d, analytic_sphere;
  std::vector<std::string> warnings;
  std::string hadamard_unavailable;  // reason, when d_c is not a power of two ("" otherwise)
  std::string mixing_basis = "hadamard";  // the Hadamard-type basis calibrated (and of the FP4 / Lloyd-Max rows)
};

// Weights of one attention layer (float64), e.g. from a checkpoint.
using WeightsProvider = std::function<model::AttentionWeights(int64_t layer)>;

CalibrationResult calibrate(const model::MlaConfig& cfg, const WeightsProvider& weights,
                            const std::string& checkpoint_fingerprint,
                            const CalibrationOptions& opt);

// The basis names in output order.
inline const std::vector<std::string>& basis_names() {
  static const std::vector<std::string> n = {"identity", "hadamard", "pca", "qk"};
  return n;
}

// The bases calibrated for latent width d_c: basis_names(), except that "hadamard" (Sylvester,
// d_c = 2^k only) becomes "hadamard-block" (block-diagonal Hadamard, any d_c; equal to the
// Sylvester one at d_c = 2^k) when d_c is not a power of two.
std::vector<std::string> calibrated_bases(int64_t d_c);
// Why the Sylvester Hadamard basis is unavailable for d_c ("" when it is available).
std::string hadamard_unavailable_reason(int64_t d_c);

// calib.h5 (docs/formats/calib.md), written to a temporary name and renamed when complete.
void write_calib_h5(const CalibrationResult& r, const std::string& path);
// JSON summary and the Markdown report (with a gnuplot PNG beside it when gnuplot exists).
std::string calib_summary_json(const CalibrationResult& r);
void write_report(const CalibrationResult& r, const std::string& markdown_path);

}  // namespace mla::calib
