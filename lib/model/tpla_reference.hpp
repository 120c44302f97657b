#pragma once
// Float64 reference of TPLA (Tensor-Parallel Latent Attention) on one layer: each rank's
// sliced attention and the sum over ranks (SPEC section 2 steps 3-4; TPLA paper section 4).
//
// The converter's per-rank checkpoints must compute what this computes, so the tests compare
//   sum_r (rank r's sliced checkpoint run through attention) vs tpla_attention(...).out
// (weights passed AFTER gamma absorption and rotation: the full, unsliced, rotated
// AttentionWeights) and tpla_attention(...).out vs attention_naive(original weights) (the
// slicing error). The rank -> (group, heads, latent slice) mapping is model::TplaLayout
// (model/tpla_layout.hpp), the one placement the converter and verify-decode use too.
//
// Per rank (group k, latent slice c_k of width d_c/g, its heads h):
//   norm approx: x_k = c_k / sqrt(mean(c_k^2) + eps) * gamma_k * sqrt(g * f_k)
//                (what a stock RMSNorm computes with sqrt(g f_k) folded into the rank's
//                kv_a_layernorm)
//   norm exact:  x_k = (c / sqrt(mean(c^2) + eps) * gamma)_k   (one all-reduced sum of squares)
//   q_lat_k[h] = W_UK[h][:, slice k]^T q_nope[h]
//   s[h,j]     = scale * (mu_k * q_lat_k[h].x_k[j] + q_pe[h].k_pe[j])     (causal)
//   o[h]       = W_UV[h][:, slice k] softmax_j(s[h,:]) @ x_k
//   partial_r  = o_proj[:, its heads' columns] concat_h o[h]               [T, D]
// Output = sum over ranks of partial_r (the row-parallel all-reduce).
// With g = 1 (plain head-parallel TP) or with all latent energy in one slice and the exact
// norm, this equals attention_naive to rounding.
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "model/attention_reference.hpp"
#include "model/config.hpp"
#include "model/tpla_layout.hpp"

namespace mla::model {

struct TplaSlicing {
  int64_t tp = 1;
  int64_t groups = 1;      // g: divides tp; d_c % g == 0; H % (tp/g) == 0
  std::vector<double> f;   // [g] energy fraction of slice k; empty: 1/g each
  std::vector<double> mu;  // [g] content-logit scale of slice k; empty: 1 each
  NormMode norm = NormMode::Approx;

  // Throws InputError naming the bad field and value (tp, groups, f/mu sizes or values, and
  // divisibility of H and d_c).
  void validate(const MlaConfig& cfg) const;
  double f_of(int64_t k) const { return f.empty() ? 1.0 / static_cast<double>(groups) : f[k]; }
  double mu_of(int64_t k) const { return mu.empty() ? 1.0 : mu[k]; }
};

// The placement of one rank (model::TplaLayout's heads() and latent(), flattened).
struct TplaRankPlacement {
  int64_t rank = 0;
  int64_t group = 0;
  int64_t head_begin = 0, head_end = 0;      // heads [begin, end)
  int64_t latent_begin = 0, latent_end = 0;  // latent columns [begin, end) of d_c
};
TplaRankPlacement tpla_rank_placement(const MlaConfig& cfg, const TplaSlicing& s, int64_t rank);

// x_k [T, d_c/g] of group k from the latent c [T, d_c] under the slicing's norm mode.
MatrixR tpla_slice_latent(const MlaConfig& cfg, const AttentionWeights& w, const TplaSlicing& s,
                          const MatrixR& c, int64_t group);

struct TplaResult {
  std::vector<MatrixR> partial;  // [tp], each [T, D]: rank r's o_proj partial output
  MatrixR out;                   // [T, D]: sum over ranks
};

// TPLA for every token (prefill and decode both sliced), h [T, D] at pos0.., causal.
TplaResult tpla_attention(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                          const TplaSlicing& s, int64_t pos0 = 0);

// PD separation (SPEC 2 step 4): the first P rows run exact MLA (attention_naive; their cache
// rows hold the exact global x, sliced per group), the remaining rows are decoded one at a
// time with TPLA against that cache plus their own sliced rows. Returns [rows, D].
MatrixR tpla_prefill_then_decode(const MlaConfig& cfg, const AttentionWeights& w,
                                 const MatrixR& h, int64_t P, const TplaSlicing& s);

}  // namespace mla::model
