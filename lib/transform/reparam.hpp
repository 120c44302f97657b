#pragma once
// Exact reparameterisation of one MLA layer (SPEC section 2, steps 1-2), float64 throughout:
//   1. absorb gamma:  kv_b_proj <- kv_b_proj diag(gamma_kv),  gamma_kv <- 1
//   2. rotate by U:   latent rows of kv_a_proj_with_mqa <- U^T W_DKV,  kv_b_proj <- kv_b_proj U
// RMS is rotation-invariant, so the layer computes the same function (checked to ~1e-12 in
// tests/transform). The RoPE rows of kv_a_proj_with_mqa are untouched.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/tensor.hpp"
#include "model/attention_reference.hpp"
#include "model/config.hpp"

namespace mla::transform {

enum class Reparam { Identity, Hadamard, Pca, Qk, HadamardBlock };
// "identity" | "hadamard" | "pca" | "qk" | "hadamard-block"
std::string_view reparam_name(Reparam r);
Reparam parse_reparam(std::string_view name);        // throws InputError naming the value

// The orthogonal d_c x d_c rotation U (columns = the new basis vectors).
//  identity: I.
//  hadamard: U = D H / sqrt(d_c) (lib/quant/hadamard.hpp); D = I without a seed. d_c must be
//            a power of two (Sylvester's construction exists only there): InputError otherwise,
//            naming d_c and `layer_label`.
//  hadamard-block: U = D blockdiag(H_b) (quant::block_hadamard_basis): any d_c (96 = 64 + 32);
//            equal to hadamard when d_c is a power of two.
//  pca:      `pca_basis` (columns = eigenvectors of the uncentred second moment of c/rms(c),
//            descending eigenvalue, from mla-calibrate); required, must be d_c x d_c and
//            orthogonal to 1e-8 (InputError naming `layer_label` and the deviation otherwise).
//  qk:       the same checks on `pca_basis`, here the qk basis (eigenvectors of the symmetrised
//            product of the key and query second moments, from mla-calibrate; docs/math.md).
// The bases fitted by mla-calibrate (pca, qk) need a calibration file.
inline bool needs_calibrated_basis(Reparam r) { return r == Reparam::Pca || r == Reparam::Qk; }
// The bases with a random-sign seed (D).
inline bool uses_hadamard_seed(Reparam r) { return r == Reparam::Hadamard || r == Reparam::HadamardBlock; }
MatrixR make_rotation(Reparam kind, int64_t d_c, std::optional<uint64_t> seed,
                      const MatrixR* pca_basis, const std::string& layer_label);

// The quantisation rotation of a 4-bit KV cache (mla-convert --kv fp4|codebook, SPEC section 6):
// blockdiag(V, ..., V) with g blocks of V = D H_w / sqrt(w), w = d_c / g (the TPLA slice width;
// g = 1: one Sylvester Hadamard over the whole latent), D from `seed` as hadamard_basis. Applied
// after the slicing basis (U_total = U_basis * this), so it mixes only inside each rank's slice:
// f_k, mu_k and every slice's partial logit are unchanged. InputError naming `label` and w
// unless w is a power of two.
MatrixR kv4_slice_rotation(int64_t d_c, int g, std::optional<uint64_t> seed, const std::string& label);

// Step 1, in place.
void absorb_gamma(const model::MlaConfig& cfg, model::AttentionWeights& w);
// Step 2, in place. Needs gamma_kv = 1 (step 1 first): an elementwise gamma does not commute
// with U, so rotating before absorbing would change the function (InputError otherwise).
void rotate_latent(const model::MlaConfig& cfg, model::AttentionWeights& w, const MatrixR& U);

}  // namespace mla::transform
