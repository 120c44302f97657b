#pragma once
// Full value validation of a checkpoint, beyond what Checkpoint::open checks (headers, index,
// FP8 scale pairing and shapes): reads every byte of every tensor and rejects non-finite
// floats (BF16/F16/F32/F64 inf or NaN, E4M3 NaN codes) and FP8 block scales that are not
// finite and > 0. Tensors are spread over threads; the mmap pages are touched once.
#include <cstdint>

#include "io/checkpoint.hpp"

namespace mla::io {

struct ScanReport {
  int64_t tensors = 0;
  int64_t bytes = 0;
  double seconds = 0.0;
};

// Throws InputError naming the file, the tensor, the element index and its value.
ScanReport scan_checkpoint(const Checkpoint& ckpt, int threads = 0);

}  // namespace mla::io
