#pragma once
// FP8 E4M3 with 128x128 block scales, the weight format of DeepSeek-V3 checkpoints: a weight
// [rows, cols] of E4M3 codes and `<name>_scale_inv` F32 [ceil(rows/128), ceil(cols/128)], with
// w = e4m3(q) * scale_inv of the block holding the element. The one implementation of both
// directions: the checkpoint reader, the converter's row reader and encoder, and the synthetic
// checkpoint generator all call these.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace mla {

inline constexpr int64_t kFp8BlockSize = 128;

// Shape of the scale table of a [rows, cols] weight.
inline Shape fp8_scale_shape(int64_t rows, int64_t cols) {
  return {(rows + kFp8BlockSize - 1) / kFp8BlockSize, (cols + kFp8BlockSize - 1) / kFp8BlockSize};
}

// E4M3 code -> value (double), built once from the scalar oracle e4m3_to_float.
const std::array<double, 256>& e4m3_values();

// Round-to-nearest-even double -> E4M3fn, saturating at +-448, NaN -> 0x7F: the same result as
// store_from_double(F8_E4M3) (tests compare them element by element), with integer bit
// arithmetic because the synthetic generator encodes billions of values.
uint8_t fast_double_to_e4m3(double x);

// Columns [c0, c1) of one row as float64: `codes` is the row's E4M3 codes (index c), `scales`
// the row's block-row of the scale table (F32, little-endian, index c / 128). Exact: an E4M3
// value (4 significant bits) times a float (24) fits a double.
void dequantize_fp8_row(const uint8_t* codes, const std::byte* scales, int64_t c0, int64_t c1, double* out);

// Block quantisation: per 128x128 block scale_inv = float(amax / 448) (1 for an all-zero
// block), q = e4m3(w / scale_inv). Non-finite input throws InputError naming `name` and [i, j].
struct Fp8Block {
  OwnedTensor weight;     // F8_E4M3 [rows, cols], named `name`
  OwnedTensor scale_inv;  // F32 [ceil(rows/128), ceil(cols/128)], named <name>_scale_inv
};
Fp8Block quantize_fp8_block(const std::string& name, const MatrixR& w);
// The inverse; checks dtype, shapes and byte sizes (InputError naming `name`).
MatrixR dequantize_fp8_block(const TensorView& weight, const TensorView& scale_inv, const std::string& name);

}  // namespace mla
