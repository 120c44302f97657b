#pragma once
// TPLA slicing of one reparameterised MLA layer for tensor-parallel degree tp with g latent
// groups (SPEC section 2 steps 3-4; docs/sharding.md).
//
// Rank placement (which heads, which latent columns): model::TplaLayout. Each head's output is
// the sum over groups of its slice's attention; o_proj is row-parallel, so the all-reduce of
// o_proj outputs over all ranks sums exactly that.
//
// Corrections folded into the rank's weights (gamma already absorbed, so gamma_kv = 1):
//  - kv_a_layernorm (width d_c/g) := sqrt(g f_k) under --norm approx, so the local
//    c_k / rms(c_k) * sqrt(g f_k) ~= c_k / rms(c) (f_k: energy fraction of slice k);
//    := 1 under --norm exact (the engine all-reduces the sum of squares per token).
//  - mu_k multiplies the W_UK rows (the first d_n rows of each head's block of kv_b_proj),
//    slice k's columns only. Those rows enter only k_nope = W_UK x (naive) or
//    q_lat = W_UK^T q_nope (absorbed), so the content logit q_lat_k . x_k is scaled by mu_k
//    and nothing else changes: W_UV (the d_v value rows), the RoPE logit and the cache are
//    untouched.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"
#include "model/attention_reference.hpp"
#include "model/config.hpp"
#include "model/tpla_layout.hpp"

namespace mla::transform {

// The placement and the norm modes are model's (model/tpla_layout.hpp), shared with the
// float64 reference and verify-decode.
using model::NormMode;
using model::norm_mode_name;
using model::parse_norm_mode;
using model::Range;
using model::TplaLayout;

// Per-layer corrections: f [g] (energy fractions, default 1/g) and mu [H, g] (default 1).
struct SliceCorrections {
  std::vector<double> f;
  MatrixR mu;
  static SliceCorrections defaults(int64_t num_heads, int g);
};

// The rank's own MLA config: num_heads = H/(tp/g), kv_lora_rank = d_c/g, the rest unchanged.
model::MlaConfig rank_attention_config(const model::MlaConfig& cfg, const TplaLayout& layout);

// The value of the rank's kv_a_layernorm (every entry): sqrt(g f_k) or 1.
double layernorm_scale(const TplaLayout& layout, int rank, const SliceCorrections& corr, NormMode norm);

// Slices reparameterised weights (gamma_kv must be 1) for one rank and folds the corrections.
// The result is a valid layer for rank_attention_config(cfg, layout).
model::AttentionWeights slice_attention(const model::MlaConfig& cfg, const model::AttentionWeights& w,
                                        const TplaLayout& layout, int rank, const SliceCorrections& corr,
                                        NormMode norm);

// The three latent-side pieces slice_attention is made of (the converter calls them directly,
// so that q/o projections can be streamed without float64 copies):
// kv_a_proj_with_mqa [d_c + d_r, D] -> group k's latent rows followed by the d_r RoPE rows.
MatrixR slice_kv_a(const model::MlaConfig& cfg, const MatrixR& kv_a, const TplaLayout& layout, int rank);
// kv_b_proj [H (d_n + d_v), d_c] -> the rank's heads' blocks x group k's columns, W_UK rows x mu.
MatrixR slice_kv_b(const model::MlaConfig& cfg, const MatrixR& kv_b, const TplaLayout& layout, int rank,
                   const SliceCorrections& corr);

// Row ranges of the rank's heads in a head-major [H * per_head, ...] tensor (q_proj, q_b_proj)
// or columns of o_proj ([D, H*d_v]): [heads.begin * per_head, heads.end * per_head).
Range head_block(const TplaLayout& layout, int rank, int64_t per_head);

}  // namespace mla::transform
