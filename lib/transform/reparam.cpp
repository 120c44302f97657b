#include "transform/reparam.hpp"

#include <cmath>

#include "core/error.hpp"
#include "quant/hadamard.hpp"

namespace mla::transform {

namespace {
std::string blocks_text(int64_t d_c) {
  std::string t;
  for (std::size_t b : quant::hadamard_blocks(static_cast<std::size_t>(d_c))) t += (t.empty() ? "" : " + ") + std::to_string(b);
  return t;
}
}  // namespace

std::string_view reparam_name(Reparam r) {
  switch (r) {
    case Reparam::Identity: return "identity";
    case Reparam::Hadamard: return "hadamard";
    case Reparam::Pca: return "pca";
    case Reparam::Qk: return "qk";
    case Reparam::HadamardBlock: return "hadamard-block";
  }
  return "?";
}

Reparam parse_reparam(std::string_view name) {
  if (name == "identity") return Reparam::Identity;
  if (name == "hadamard") return Reparam::Hadamard;
  if (name == "pca") return Reparam::Pca;
  if (name == "qk") return Reparam::Qk;
  if (name == "hadamard-block") return Reparam::HadamardBlock;
  throw InputError("unknown reparameterisation '" + std::string(name) +
                   "' (expected identity, hadamard, hadamard-block, pca or qk)");
}

MatrixR make_rotation(Reparam kind, int64_t d_c, std::optional<uint64_t> seed,
                      const MatrixR* pca_basis, const std::string& layer_label) {
  switch (kind) {
    case Reparam::Identity:
      return MatrixR::Identity(d_c, d_c);
    case Reparam::Hadamard:
      if (!quant::is_power_of_two(static_cast<size_t>(d_c)))
        throw InputError(layer_label + ": --reparam hadamard needs kv_lora_rank (d_c) to be a power of two "
                         "(Sylvester Hadamard matrices exist only for n = 2^k), got d_c = " +
                         std::to_string(d_c) + "; --reparam hadamard-block (block-diagonal Hadamard over blocks " +
                         blocks_text(d_c) + ") mixes any width; identity, pca and qk need no power of two");
      return quant::hadamard_basis(static_cast<size_t>(d_c), seed);
    case Reparam::HadamardBlock:
      return quant::block_hadamard_basis(static_cast<size_t>(d_c), seed);
    case Reparam::Pca:
    case Reparam::Qk: {
      const std::string name(reparam_name(kind));
      if (pca_basis == nullptr)
        throw InputError(layer_label + ": --reparam " + name + " needs a calibration file (--calib) with " + name +
                         "_basis");
      if (pca_basis->rows() != d_c || pca_basis->cols() != d_c)
        throw InputError(layer_label + ": " + name + "_basis has shape [" + std::to_string(pca_basis->rows()) + ", " +
                         std::to_string(pca_basis->cols()) + "], expected [" + std::to_string(d_c) + ", " +
                         std::to_string(d_c) + "]");
      const double dev = (pca_basis->transpose() * *pca_basis - MatrixR::Identity(d_c, d_c)).cwiseAbs().maxCoeff();
      // A basis that is not orthogonal would change the layer's function, not just rotate it.
      if (!(dev <= 1e-8))
        throw InputError(layer_label + ": " + name + "_basis is not orthogonal (max |U^T U - I| = " + std::to_string(dev) + ")");
      return *pca_basis;
    }
  }
  throw InputError("unknown reparameterisation");
}

MatrixR kv4_slice_rotation(int64_t d_c, int g, std::optional<uint64_t> seed, const std::string& label) {
  if (g < 1 || d_c % g != 0)
    throw InputError(label + ": latent width d_c = " + std::to_string(d_c) + " does not split into g = " +
                     std::to_string(g) + " slices");
  const int64_t w = d_c / g;
  if (!quant::is_power_of_two(static_cast<size_t>(w)))
    throw InputError(label + ": the 4-bit cache's Hadamard rotation needs a power-of-two slice width, got d_c / g = " +
                     std::to_string(d_c) + " / " + std::to_string(g) + " = " + std::to_string(w));
  const Eigen::MatrixXd v = quant::hadamard_basis(static_cast<size_t>(w), seed);
  MatrixR out = MatrixR::Zero(d_c, d_c);
  for (int k = 0; k < g; ++k) out.block(k * w, k * w, w, w) = v;
  return out;
}

void absorb_gamma(const model::MlaConfig& cfg, model::AttentionWeights& w) {
  const int64_t d_c = cfg.kv_lora_rank;
  if (w.kv_a_layernorm.size() != d_c || w.kv_b_proj.cols() != d_c)
    throw InputError("absorb_gamma: kv_a_layernorm / kv_b_proj width does not match kv_lora_rank " +
                     std::to_string(d_c));
  for (int64_t j = 0; j < d_c; ++j) w.kv_b_proj.col(j) *= w.kv_a_layernorm(j);
  w.kv_a_layernorm.setOnes();
}

void rotate_latent(const model::MlaConfig& cfg, model::AttentionWeights& w, const MatrixR& U) {
  const int64_t d_c = cfg.kv_lora_rank;
  if (U.rows() != d_c || U.cols() != d_c)
    throw InputError("rotate_latent: U must be d_c x d_c = " + std::to_string(d_c));
  for (int64_t j = 0; j < w.kv_a_layernorm.size(); ++j)
    if (w.kv_a_layernorm(j) != 1.0)
      throw InputError("rotate_latent: kv_a_layernorm[" + std::to_string(j) + "] = " +
                       std::to_string(w.kv_a_layernorm(j)) + ", absorb gamma first");
  if (U == MatrixR::Identity(d_c, d_c)) {
    // The products below would give every entry x * 1 + (zeros) = x, except that -0.0 comes
    // out as +0.0 (the GEMM accumulates from +0.0): the same values without the two GEMMs.
    w.kv_a_proj_with_mqa.topRows(d_c).array() += 0.0;
    w.kv_b_proj.array() += 0.0;
    return;
  }
  MatrixR latent = U.transpose() * w.kv_a_proj_with_mqa.topRows(d_c);
  w.kv_a_proj_with_mqa.topRows(d_c) = latent;
  MatrixR kvb = w.kv_b_proj * U;
  w.kv_b_proj = std::move(kvb);
}

}  // namespace mla::transform
