#pragma once
// Reading checkpoint tensors row by row as float64 (FP8 block-dequantised, every value
// checked finite) and encoding float64 rows into the output dtype (BF16, F32, or FP8 E4M3
// with fresh 128x128 block scales), without ever holding a whole model in memory.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/phase_clock.hpp"
#include "core/tensor.hpp"

namespace mla::transform {

// Where reading and encoding add their time and bytes (mla-convert --profile); see
// core/phase_clock.hpp. Each field names one phase of the conversion.
struct EncodeStats {
  PhaseTotals read;         // input pages brought into memory (populate_rows): disk / page cache
  PhaseTotals dequantise;   // stored dtype (FP8 x block scale, BF16, F32) -> float64
  PhaseTotals encode;       // float64 -> BF16 / F32 cast or FP8 block quantisation
  PhaseTotals fast_encode;  // the fused exact paths: BF16/F32 byte copy, FP8 -> BF16 table
};

// A checkpoint tensor (a zero-copy view) plus its FP8 `_scale_inv` when it has one.
class SourceTensor {
 public:
  SourceTensor(std::string name, TensorView weight, std::optional<TensorView> scale_inv,
               EncodeStats* stats = nullptr);
  const std::string& name() const { return name_; }
  const Shape& shape() const { return weight_.shape; }
  int64_t rows() const { return weight_.shape.size() == 2 ? weight_.shape[0] : 1; }
  int64_t cols() const { return weight_.shape.size() == 2 ? weight_.shape[1] : weight_.shape.at(0); }
  DType dtype() const { return weight_.dtype; }
  uint64_t stored_bytes() const;  // weight + scales
  // Values [c0, c1) of row r as float64 (exact: e4m3 x f32 scale fits a double). Throws
  // InputError "tensor '<name>' has a non-finite value (nan) at [r, c]" on NaN/Inf.
  void read_row(int64_t r, int64_t c0, int64_t c1, double* out) const;
  MatrixR read_matrix() const;  // the whole tensor ([1, n] for 1-D), populated first
  // Rows [r0, r1) of the values (and their scales) read into memory now, in one call
  // (MADV_POPULATE_READ; a no-op where the kernel lacks it), so reading is one timed phase
  // and the encoders never stall on page faults.
  void populate_rows(int64_t r0, int64_t r1) const;
  EncodeStats* stats() const { return stats_; }
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
  EncodeStats* stats_ = nullptr;
};

// Produces rows [r0, r1) of a [rows, cols] float64 matrix into `out` (row-major).
using RowSource = std::function<void(int64_t r0, int64_t r1, double* out)>;

// Large encoded buffers are recycled: a freed buffer of >= 4 MiB (sizes rounded up to 1 MiB)
// is kept, up to 512 MiB in all, for the next buffer of the same size, so a conversion does not
// pay a page fault and a kernel zero fill for every 4 KiB of every output buffer.
// release_buffer_pool() returns the kept ones to the system (at the end of a conversion).
void* pooled_allocate(size_t bytes);
void pooled_deallocate(void* p, size_t bytes) noexcept;
void release_buffer_pool() noexcept;

// Leaves new elements uninitialised: the encoders overwrite every byte, so std::vector's
// zero fill on resize would be one more pass over every output byte (and a recycled buffer's
// old bytes are all overwritten).
template <class T>
struct UninitAllocator : std::allocator<T> {
  T* allocate(size_t n) { return static_cast<T*>(pooled_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { pooled_deallocate(p, n * sizeof(T)); }
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using ByteBuffer = std::vector<std::byte, UninitAllocator<std::byte>>;

struct EncodedTensor {
  ByteBuffer weight;
  ByteBuffer scale_inv;  // F32 [ceil(rows/128), ceil(cols/128)] for FP8, else empty
};
// Encodes a [rows, cols] float64 source into `dtype` (BF16, F32, F16 or F8_E4M3). FP8 uses
// quantize_fp8_block (core/fp8_block.hpp) on 128-row bands (identical to quantising the whole matrix).
// `stats`: the cast / quantisation time goes to stats->encode (the source's own time is not
// counted here).
EncodedTensor encode_rows(const std::string& name, DType dtype, int64_t rows, int64_t cols, const RowSource& src,
                          EncodeStats* stats = nullptr);
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
