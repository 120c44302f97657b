#pragma once
// Loads weights from a checkpoint as float64 (FP8 block-dequantised exactly) into the float64
// reference's types: one layer's attention (model::AttentionWeights, shapes validated against
// the checkpoint's config; layers >= num_hidden_layers are the MTP layers), or a whole dense
// model (model::DenseModel).
#include <cstdint>

#include "io/checkpoint.hpp"
#include "model/attention_reference.hpp"
#include "model/dense_forward.hpp"

namespace mla::io {

// Throws InputError naming the checkpoint and the tensor when one is missing, the layer index
// is out of range, or a shape disagrees with the config.
model::AttentionWeights load_attention_weights(const Checkpoint& ckpt, int64_t layer);

// A dense model (the shipped tiny models) from a checkpoint directory; config.json's
// tie_word_embeddings is respected when the checkpoint has no lm_head.weight.
model::DenseModel load_dense_model(const Checkpoint& ckpt);

}  // namespace mla::io
