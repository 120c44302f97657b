#pragma once
#include <cstdint>

#include "io/checkpoint.hpp"
#include "model/attention_reference.hpp"

namespace mla::calib {
// float64 attention weights of `layer`; InputError names a missing or mis-shaped tensor.
model::AttentionWeights load_layer_weights(const io::Checkpoint& ckpt, int64_t layer);
}  // namespace mla::calib
