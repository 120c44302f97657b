#pragma once
// Reading checkpoint tensors row by row as float64 (FP8 block-dequantised, every value
// checked finite) and encoding float64 rows into the output dtype (BF16, F32, or FP8 E4M3
// with fresh 128x128 block scales), without ever holding a whole model in memory.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace mla::transform {

// A checkpoint tensor (a zero-copy view) plus its FP8 `_scale_inv` when it has one.
class SourceTensor {
 public:
  SourceTensor(std::string name, TensorView weight, std::optional<TensorView> scale_inv);
  const std::string& name() const { return name_; }
  const Shape& shape() const { return weight_.shape; }
  int64_t rows() const { return weight_.shape.size() == 2 ? weight_.shape[0] : 1; }
  int64_t cols() const { return weight_.shape.size() == 2 ? weight_.shape[1] : weight_.shape.at(0); }
  DType dtype() const { return weight_.dtype; }
  uint64_t stored_bytes() const;  // weight + scales
  // Values [c0, c1) of row r as float64 (exact: e4m3 x f32 scale fits a double). Throws
  // InputError "tensor '<name>' has a non-finite value (nan) at [r, c]" on NaN/Inf.
  void read_row(int64_t r, int64_t c0, int64_t c1, double* out) const;
  MatrixR read_matrix() const;  // the whole tensor ([1, n] for 1-D)
  // Tells the kernel the mapped pages are no longer needed, so resident memory stays a few
  // tensors (the file pages stay in the page cache).
  void release_pages() const;
  // The same for rows [r0, r1) only (whole pages inside them), for row-disjoint slices.
  void release_rows(int64_t r0, int64_t r1) const;
  const TensorView& weight() const { return weight_; }
  const std::optional<TensorView>& scale() const { return scale_; }

 private:
  std::string name_;
  TensorView weight_;
  std::optional<TensorView> scale_;
  int64_t scale_cols_ = 0;
};

// Exact round-to-nearest-even double -> BF16 bits (same result as core double_to_bf16,
// faster on the normal range: tests compare them).
uint16_t fast_double_to_bf16(double v);

// Produces rows [r0, r1) of a [rows, cols] float64 matrix into `out` (row-major).
using RowSource = std::function<void(int64_t r0, int64_t r1, double* out)>;

struct EncodedTensor {
  std::vector<std::byte> weight;
  std::vector<std::byte> scale_inv;  // F32 [ceil(rows/128), ceil(cols/128)] for FP8, else empty
};
// Encodes a [rows, cols] float64 source into `dtype` (BF16, F32, F16 or F8_E4M3). FP8 uses
// io::quantize_fp8_block on 128-row bands (identical to quantising the whole matrix).
EncodedTensor encode_rows(const std::string& name, DType dtype, int64_t rows, int64_t cols, const RowSource& src);
RowSource matrix_rows(const MatrixR& m);

// Fast exact paths for the slice [rows) x [cols) of `src` encoded into `dtype`: BF16 -> BF16 and
// F32 -> F32 (byte copies plus a finite check on the bits), and F8_E4M3 -> BF16 (a 256-entry
// table per 128x128 block: the same double product and rounding as the generic path, so the
// bytes are identical). Returns std::nullopt when there is no fast path for the pair.
// Non-finite values throw the same InputError as SourceTensor::read_row.
// `release_as_read`: drop the input pages of rows already encoded (only when no other slice
// reads those rows), so resident memory holds the output slice, not the input too.
std::optional<EncodedTensor> encode_slice_fast(const SourceTensor& src, int64_t r0, int64_t r1, int64_t c0,
                                               int64_t c1, DType dtype, bool release_as_read = false);

}  // namespace mla::transform
