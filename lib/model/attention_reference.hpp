#pragma once
// Float64 reference of one MLA attention layer on CPU: the oracle everything else is checked
// against (conversion, calibration, CPU twins, GPU decode kernels). The math is SPEC section 1
// and is written out, as implemented, in docs/math.md.
//
// Conventions used throughout:
//  - weights are float64 in HF layout [out, in] (y = W x), see AttentionWeights;
//  - per-token activations are rows: h is [T, D], outputs [T, D];
//  - per-head quantities are stored head-major in one row: q_nope [T, H*d_n] holds head h at
//    columns [h*d_n, (h+1)*d_n), likewise q_pe [T, H*d_r], q_lat/o_lat [T, H*d_c], o [T, H*d_v];
//  - token t of h sits at position pos0 + t; the mask is causal (t attends to s <= t), and
//    attention_naive/attention_absorbed see only the T tokens given (no earlier context);
//  - LSE is the natural-log log-sum-exp of the *scaled* logits (scale * (q.k)), per token/head;
//  - RoPE is applied in the pair layout of the config (docs/math.md; rope.hpp), in place, so
//    q_pe / k_pe keep the checkpoint's coordinate order.
#include <cstdint>

#include "core/tensor.hpp"
#include "model/config.hpp"

namespace mla::model {

// One layer's attention weights, float64, HF [out, in] layout.
struct AttentionWeights {
  MatrixR q_proj;              // [H*(d_n+d_r), D]; empty when cfg.q_lora_rank is set
  MatrixR q_a_proj;            // [q_lora_rank, D]; empty without q_lora
  VectorD q_a_layernorm;       // [q_lora_rank];    empty without q_lora
  MatrixR q_b_proj;            // [H*(d_n+d_r), q_lora_rank]; empty without q_lora
  MatrixR kv_a_proj_with_mqa;  // [d_c + d_r, D]: latent rows first, then the RoPE rows
  VectorD kv_a_layernorm;      // [d_c] (gamma_kv)
  MatrixR kv_b_proj;           // [H*(d_n+d_v), d_c]: per head d_n rows of W_UK, d_v of W_UV
  MatrixR o_proj;              // [D, H*d_v]

  // Throws InputError naming the tensor, its shape and the expected shape on any mismatch
  // (including a q_proj present with q_lora, or missing without it).
  void validate(const MlaConfig& cfg) const;

  // W_UK[h] = kv_b_proj rows [h*(d_n+d_v), h*(d_n+d_v)+d_n)  -> [d_n, d_c]
  MatrixR w_uk(const MlaConfig& cfg, int64_t head) const;
  // W_UV[h] = the next d_v rows                               -> [d_v, d_c]
  MatrixR w_uv(const MlaConfig& cfg, int64_t head) const;
};

// Intermediates of one forward, filled when a trace pointer is passed. Fields a form does
// not compute are left empty (naive: q_lat/o_lat empty; absorbed: k_nope/v empty).
struct AttentionTrace {
  MatrixR q_nope;  // [T, H*d_n]
  MatrixR q_pe;    // [T, H*d_r], after RoPE
  MatrixR c;       // [T, d_c], latent before RMSNorm
  MatrixR x;       // [T, d_c], RMSNorm_kv(c)
  MatrixR k_pe;    // [T, d_r], after RoPE (shared by all heads)
  MatrixR k_nope;  // [T, H*d_n]  (naive only)
  MatrixR v;       // [T, H*d_v]  (naive only)
  MatrixR q_lat;   // [T, H*d_c]  (absorbed only): W_UK[h]^T q_nope[h]
  MatrixR o_lat;   // [T, H*d_c]  (absorbed only): sum_j p[h,j] x_j
  MatrixR lse;     // [T, H], natural log, of the scaled logits
  MatrixR o;       // [T, H*d_v], attention output before o_proj
};

// Query side: q_nope [T, H*d_n] and q_pe [T, H*d_r] (RoPE applied at pos0 + t).
struct QueryParts {
  MatrixR q_nope;
  MatrixR q_pe;
};
QueryParts project_queries(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                           int64_t pos0);
// q_lat [T, H*d_c]: per head W_UK[h]^T q_nope[h].
MatrixR absorb_queries(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& q_nope);
// o [T, H*d_v] from o_lat [T, H*d_c]: per head W_UV[h] o_lat[h].
MatrixR expand_latent_output(const MlaConfig& cfg, const AttentionWeights& w,
                             const MatrixR& o_lat);

// The latent KV cache of absorbed MLA: per token x = RMSNorm_kv(c) and the roped k_pe.
struct LatentCache {
  MatrixR x;     // [L, d_c]
  MatrixR k_pe;  // [L, d_r], RoPE applied at the token's position
  int64_t length() const { return x.rows(); }
  // Appends rows (x_new [n, d_c], k_pe_new [n, d_r]).
  void append(const MatrixR& x_new, const MatrixR& k_pe_new);
};
// Cache rows for h [T, D] at positions pos0..pos0+T-1. `c_out`, if given, receives c [T, d_c].
LatentCache compute_latent(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                           int64_t pos0, MatrixR* c_out = nullptr);

// Full layer, naive form (K/V decompressed per head). Returns o_proj output [T, D].
MatrixR attention_naive(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                        int64_t pos0 = 0, AttentionTrace* trace = nullptr);
// Full layer, absorbed form (attention in latent space). Same function as attention_naive.
MatrixR attention_absorbed(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                           int64_t pos0 = 0, AttentionTrace* trace = nullptr);

// Exactly what a GPU absorbed decode kernel computes, for one query token against a cache:
// s[h,j] = scale * (q_lat[h].x_j + q_pe[h].k_pe_j), o_lat[h] = softmax_j(s[h,:]) @ x,
// lse[h] = log(sum_j exp(s[h,j])) (natural log). No mask: every cache row is attended.
struct DecodeCoreResult {
  MatrixR o_lat;  // [H, d_c]
  VectorD lse;    // [H]
};
DecodeCoreResult absorbed_decode_core(const MatrixR& q_lat /*[H, d_c]*/,
                                      const MatrixR& q_pe /*[H, d_r]*/, const LatentCache& cache,
                                      double scale);

// Prefill of P prompt tokens at positions 0..P-1 with exact MLA (naive form): returns the
// outputs [P, D] and the latent cache [P rows] the decode steps continue from.
struct PrefillResult {
  LatentCache cache;
  MatrixR out;  // [P, D]
};
PrefillResult prefill(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h_prompt);
// One decode step: appends token h_token [1, D] at `pos` (normally cache.length()) to the
// cache, attends (absorbed) over the whole cache including itself, returns [1, D].
MatrixR decode_step(const MlaConfig& cfg, const AttentionWeights& w, LatentCache& cache,
                    const MatrixR& h_token, int64_t pos, AttentionTrace* trace = nullptr);
// Prefills the first P rows of h [P+T, D], then decodes the remaining T one at a time.
// Returns all P+T outputs; equal to attention_naive(cfg, w, h, 0) up to rounding.
MatrixR prefill_then_decode(const MlaConfig& cfg, const AttentionWeights& w, const MatrixR& h,
                            int64_t P);

}  // namespace mla::model
