#pragma once
// Float64 forward pass of a dense MLA decoder (the tiny models in datasets/tiny-v*, or any
// DeepSeek-style checkpoint whose layers all use the dense MLP):
//   x = embed_tokens[tokens]
//   per layer i:  h = RMSNorm_in(x);  x += attention(h)          (attention_reference, naive)
//                 x += down(silu(gate(RMSNorm_post(x))) * up(RMSNorm_post(x)))   (SwiGLU)
//   logits = lm_head(RMSNorm_final(x))
// Each call runs one sequence from position 0 (token t at position t), causal.
// MoE layers are refused with a clear error: this forward exists to check the attention math
// end to end against transformers and to measure perplexity, not to serve large models.
//
// The library keeps model/ free of I/O: weights come through a loader callback (see
// load_dense_model), which the tools and tests bind to io::Checkpoint::load_matrix.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "model/attention_reference.hpp"
#include "model/config.hpp"

namespace mla::model {

struct DenseLayerWeights {
  VectorD input_layernorm;           // [D]
  AttentionWeights attn;             // HF [out, in]
  VectorD post_attention_layernorm;  // [D]
  MatrixR gate_proj;                 // [I, D]
  MatrixR up_proj;                   // [I, D]
  MatrixR down_proj;                 // [D, I]
};

struct DenseModel {
  MlaConfig cfg;
  MatrixR embed_tokens;  // [V, D]
  std::vector<DenseLayerWeights> layers;
  VectorD final_norm;    // [D]
  MatrixR lm_head;       // [V, D]
};

// Returns the float64 values of one HF tensor by name (1-D tensors as a 1 x n row), throwing
// InputError when missing. Bind it to io::Checkpoint::load_matrix.
using TensorLoader = std::function<MatrixR(const std::string& name)>;

// Loads every weight of a dense MLA model and checks each shape against cfg (InputError names
// the tensor, its shape and the expected one). Throws InputError when a layer would be MoE
// (layer >= first_k_dense_replace with n_routed_experts > 0) or when the config has MTP layers
// (not part of next-token logits). A missing lm_head.weight falls back to embed_tokens when
// the config says tie_word_embeddings (tied_embeddings = true).
DenseModel load_dense_model(const MlaConfig& cfg, const TensorLoader& load, bool tied_embeddings = false);

// What a forward may record besides the logits (each [T, D] per layer when requested).
struct ForwardTrace {
  bool want_hidden = false;    // attention input after input_layernorm
  bool want_attn_out = false;  // attention output after o_proj
  std::vector<MatrixR> hidden;
  std::vector<MatrixR> attn_out;
};

// Logits [T, V] for one sequence (tokens must be in [0, V): InputError otherwise).
MatrixR dense_forward(const DenseModel& m, std::span<const int32_t> tokens, ForwardTrace* trace = nullptr);

// SwiGLU MLP of one layer on rows y [T, D] (exposed for tests).
MatrixR swiglu_mlp(const DenseLayerWeights& w, const MatrixR& y);

// Sum over t = 1..T-1 of -log softmax(logits[t-1])[tokens[t]] (natural log), i.e. the
// next-token NLL of a window, and the count of predicted tokens (T - 1).
struct WindowNll {
  double nll_sum = 0.0;
  int64_t predicted = 0;
};
WindowNll next_token_nll(const MatrixR& logits, std::span<const int32_t> tokens);

// Next-token NLL over many windows (each run from position 0), spread over `threads` threads.
// bits_per_token = nll_sum / predicted / ln 2 (bits per byte for the byte-level models).
struct PerplexityResult {
  int64_t windows = 0;
  int64_t predicted = 0;
  double nll_sum = 0.0;
  double bits_per_token() const;
  double perplexity() const;  // exp(nll_sum / predicted)
};
PerplexityResult evaluate_windows(const DenseModel& m, const std::vector<std::vector<int32_t>>& windows,
                                  int threads = 1);

}  // namespace mla::model
