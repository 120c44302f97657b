#pragma once
// The float64 TPLA path of verify-decode (the same computation as its per-token float64 path:
// no bf16 cache, no kernel) for every decoded position of a sequence at once: per rank and head
// one causal [T, P + T] score block through matrix products instead of T single-query steps.
// verify-decode's end-to-end comparison uses it to score thousands of windows on a CPU; the
// per-layer table keeps checking the kernels (or their twins) token by token.
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "io/converted_checkpoint.hpp"
#include "model/config.hpp"

namespace mla::verify {

struct TplaLayerView {
  const model::MlaConfig* cfg = nullptr;                   // the original model's
  const std::vector<io::RankAttention>* ranks = nullptr;
  const std::vector<int>* group_of = nullptr;              // latent group of each rank
  int g = 1;
  bool exact_norm = false;
};

// Attention outputs (after o_proj, summed over ranks: the all-reduce) of rows P .. n-1 of
// h [n, D], [n - P, D]. Cache rows of the P prompt tokens hold the exact global x = c / rms(c)
// (PD separation); the others the rank's own normalisation (approx) or the all-reduced rms
// (exact). Row t attends to rows 0..t. P = 0: every position through TPLA.
MatrixR tpla_attention_f64(const TplaLayerView& L, const MatrixR& h, int64_t P);

}  // namespace mla::verify
