#pragma once
// Loads one layer's attention weights from a checkpoint as float64 (FP8 block-dequantised
// exactly), in the layout of model::AttentionWeights, and validates their shapes against the
// checkpoint's config. Layers >= num_hidden_layers are the MTP layers.
#include <cstdint>

#include "io/checkpoint.hpp"
#include "model/attention_reference.hpp"

namespace mla::io {

// Throws InputError naming the checkpoint and the tensor when one is missing, the layer index
// is out of range, or a shape disagrees with the config.
model::AttentionWeights load_attention_weights(const Checkpoint& ckpt, int64_t layer);

}  // namespace mla::io
