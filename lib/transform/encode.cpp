#include "transform/encode.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/fp8_block.hpp"

namespace mla::transform {

namespace {

[[noreturn]] void non_finite(const std::string& name, int64_t r, int64_t c, double v, bool is2d) {
  const std::string where = is2d ? "[" + std::to_string(r) + ", " + std::to_string(c) + "]" : "[" + std::to_string(c) + "]";
  throw InputError("tensor '" + name + "' has a non-finite value (" + (std::isnan(v) ? "nan" : "inf") + ") at " + where);
}

}  // namespace

SourceTensor::SourceTensor(std::string name, TensorView weight, std::optional<TensorView> scale_inv,
                           EncodeStats* stats)
    : name_(std::move(name)), weight_(std::move(weight)), scale_(std::move(scale_inv)), stats_(stats) {
  if (weight_.shape.empty() || weight_.shape.size() > 2)
    throw InputError("tensor '" + name_ + "' has shape " + shape_to_string(weight_.shape) + ", expected 1-D or 2-D");
  if (!dtype_is_float(weight_.dtype) || weight_.dtype == DType::F4 || weight_.dtype == DType::F8_E8M0)
    throw InputError("tensor '" + name_ + "' has dtype " + std::string(dtype_name(weight_.dtype)) +
                     ", expected a float weight");
  if (weight_.dtype == DType::F8_E4M3) {
    if (!scale_) throw InputError("tensor '" + name_ + "' is F8_E4M3 but '" + name_ + "_scale_inv' is missing");
    const Shape want = fp8_scale_shape(rows(), cols());
    if (scale_->dtype != DType::F32 || scale_->shape != want || weight_.shape.size() != 2)
      throw InputError("tensor '" + name_ + "_scale_inv' is " + std::string(dtype_name(scale_->dtype)) + " " +
                       shape_to_string(scale_->shape) + ", expected F32 " + shape_to_string(want));
    scale_cols_ = want[1];
  } else {
    scale_.reset();  // a stray scale on a non-FP8 tensor is not applied (and not needed)
  }
}

uint64_t SourceTensor::stored_bytes() const {
  return weight_.bytes.size() + (scale_ ? scale_->bytes.size() : 0);
}

void SourceTensor::read_row(int64_t r, int64_t c0, int64_t c1, double* out) const {
  const bool is2d = weight_.shape.size() == 2;
  const size_t base = static_cast<size_t>(r * cols());
  const std::byte* data = weight_.bytes.data();
  switch (weight_.dtype) {
    case DType::F8_E4M3:
      dequantize_fp8_row(reinterpret_cast<const uint8_t*>(data) + base,
                         scale_->bytes.data() + (r / kFp8BlockSize) * scale_cols_ * 4, c0, c1, out);
      break;
    case DType::BF16:
      for (int64_t c = c0; c < c1; ++c) {
        uint16_t b;
        std::memcpy(&b, data + 2 * (base + c), 2);
        out[c - c0] = bf16_to_float(b);
      }
      break;
    case DType::F32:
      for (int64_t c = c0; c < c1; ++c) {
        float f;
        std::memcpy(&f, data + 4 * (base + c), 4);
        out[c - c0] = f;
      }
      break;
    default:
      for (int64_t c = c0; c < c1; ++c) out[c - c0] = load_as_double(weight_.dtype, data, base + c);
  }
  for (int64_t c = c0; c < c1; ++c)
    if (!std::isfinite(out[c - c0])) non_finite(name_, r, c, out[c - c0], is2d);
}

MatrixR SourceTensor::read_matrix() const {
  populate_rows(0, rows());
  ScopedPhase timed(stats_ ? &stats_->dequantise : nullptr, stored_bytes());
  MatrixR m(rows(), cols());
  for (int64_t r = 0; r < rows(); ++r) read_row(r, 0, cols(), m.data() + r * cols());
  return m;
}

namespace {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

// Whole pages covering the span, faulted in (read from disk if needed) in one call.
void populate(std::span<const std::byte> b) {
  static std::atomic<bool> supported{true};
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (b.empty() || !supported.load(std::memory_order_relaxed)) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(b.data()) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(b.data()) + b.size() + page - 1) & ~(page - 1);
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) != 0 && errno == EINVAL)
    supported = false;  // older kernel: pages fault in during the encode instead
}
}  // namespace

void SourceTensor::populate_rows(int64_t r0, int64_t r1) const {
  if (r1 <= r0) return;
  const size_t row_bytes = static_cast<size_t>(cols() * dtype_bits(weight_.dtype) / 8);
  const auto rows_span = weight_.bytes.subspan(static_cast<size_t>(r0) * row_bytes, static_cast<size_t>(r1 - r0) * row_bytes);
  ScopedPhase timed(stats_ ? &stats_->read : nullptr, rows_span.size());
  populate(rows_span);
  if (scale_) populate(scale_->bytes);  // tiny: the whole [rows/128, cols/128] table
}

namespace {
// Only whole pages inside the span: neighbours' pages stay mapped.
void drop_pages(std::span<const std::byte> b) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (b.empty()) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(b.data()) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(b.data()) + b.size()) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}
}  // namespace

namespace {
constexpr size_t kPoolMin = 4u << 20, kPoolClass = 1u << 20, kPoolCap = 512u << 20;
struct BufferPool {
  std::mutex mu;
  std::multimap<size_t, void*> free;  // capacity -> buffer
  size_t bytes = 0;
};
BufferPool& buffer_pool() {
  static BufferPool* pool = new BufferPool;  // never destroyed: frees may come during exit
  return *pool;
}
size_t pool_class(size_t bytes) { return (bytes + kPoolClass - 1) / kPoolClass * kPoolClass; }
}  // namespace

void* pooled_allocate(size_t bytes) {
  if (bytes < kPoolMin) return ::operator new(bytes);
  const size_t cap = pool_class(bytes);
  {
    BufferPool& pool = buffer_pool();
    std::lock_guard lock(pool.mu);
    if (auto it = pool.free.find(cap); it != pool.free.end()) {
      void* p = it->second;
      pool.free.erase(it);
      pool.bytes -= cap;
      return p;
    }
  }
  return ::operator new(cap);
}

void pooled_deallocate(void* p, size_t bytes) noexcept {
  if (bytes < kPoolMin) return ::operator delete(p);
  const size_t cap = pool_class(bytes);
  {
    BufferPool& pool = buffer_pool();
    std::lock_guard lock(pool.mu);
    if (pool.bytes + cap <= kPoolCap) {
      try {
        pool.free.emplace(cap, p);
        pool.bytes += cap;
        return;
      } catch (...) {  // no memory for the node: free the buffer instead
      }
    }
  }
  ::operator delete(p);
}

void release_buffer_pool() noexcept {
  BufferPool& pool = buffer_pool();
  std::lock_guard lock(pool.mu);
  for (auto& [cap, p] : pool.free) ::operator delete(p);
  pool.free.clear();
  pool.bytes = 0;
}

void SourceTensor::release_pages() const {
  drop_pages(weight_.bytes);
  if (scale_) drop_pages(scale_->bytes);
}

void SourceTensor::release_rows(int64_t r0, int64_t r1) const {
  const size_t row_bytes = static_cast<size_t>(cols() * dtype_bits(weight_.dtype) / 8);
  drop_pages(weight_.bytes.subspan(static_cast<size_t>(r0) * row_bytes, static_cast<size_t>(r1 - r0) * row_bytes));
}

std::optional<EncodedTensor> encode_slice_fast(const SourceTensor& src, int64_t r0, int64_t r1, int64_t c0,
                                               int64_t c1, DType dtype, bool release_as_read) {
  const DType in = src.dtype();
  const bool copy = (in == DType::BF16 && dtype == DType::BF16) || (in == DType::F32 && dtype == DType::F32);
  const bool table = in == DType::F8_E4M3 && dtype == DType::BF16;
  if (!copy && !table) return std::nullopt;
  // Rows go in chunks: populate (read), encode (timed), then drop the input pages when asked.
  constexpr int64_t kChunkRows = 256;
  EncodeStats* stats = src.stats();
  const int64_t ncols = c1 - c0, cols = src.cols();
  const std::byte* data = src.weight().bytes.data();
  EncodedTensor out;
  if (copy) {
    const size_t eb = in == DType::BF16 ? 2 : 4;
    out.weight.resize(static_cast<size_t>((r1 - r0) * ncols) * eb);
    for (int64_t a = r0; a < r1; a += kChunkRows) {
      const int64_t b = std::min(r1, a + kChunkRows);
      src.populate_rows(a, b);
      ScopedPhase timed(stats ? &stats->fast_encode : nullptr, static_cast<uint64_t>((b - a) * ncols) * eb);
      for (int64_t r = a; r < b; ++r) {
        std::byte* dst = out.weight.data() + static_cast<size_t>((r - r0) * ncols) * eb;
        std::memcpy(dst, data + static_cast<size_t>(r * cols + c0) * eb, static_cast<size_t>(ncols) * eb);
        for (int64_t c = 0; c < ncols; ++c) {
          bool bad;
          if (eb == 2) {
            uint16_t v;
            std::memcpy(&v, dst + 2 * c, 2);
            bad = (v & 0x7F80u) == 0x7F80u;  // exponent all ones: inf or nan
          } else {
            uint32_t v;
            std::memcpy(&v, dst + 4 * c, 4);
            bad = (v & 0x7F800000u) == 0x7F800000u;
          }
          if (bad) {
            double v;
            src.read_row(r, c0 + c, c0 + c + 1, &v);  // throws the named error
          }
        }
      }
      if (release_as_read) src.release_rows(a, b);
    }
    return out;
  }
  const auto& values = e4m3_values();
  const int64_t bs = kFp8BlockSize, bc = (cols + bs - 1) / bs;
  const std::byte* scales = src.scale()->bytes.data();
  out.weight.resize(static_cast<size_t>((r1 - r0) * ncols) * 2);
  std::vector<uint16_t> lut(static_cast<size_t>(bc) * 256);
  int64_t lut_block_row = -1;
  const auto* q = reinterpret_cast<const uint8_t*>(data);
  for (int64_t a = r0; a < r1; a += kChunkRows) {
    const int64_t b = std::min(r1, a + kChunkRows);
    src.populate_rows(a, b);
    ScopedPhase timed(stats ? &stats->fast_encode : nullptr, static_cast<uint64_t>((b - a) * ncols));
    for (int64_t r = a; r < b; ++r) {
      if (r / bs != lut_block_row) {
        lut_block_row = r / bs;
        for (int64_t k = c0 / bs; k <= (c1 - 1) / bs; ++k) {
          float sc;
          std::memcpy(&sc, scales + (lut_block_row * bc + k) * 4, 4);
          if (!std::isfinite(sc)) return std::nullopt;  // the generic path names the element
          for (int i = 0; i < 256; ++i) lut[k * 256 + i] = fast_double_to_bf16(values[i] * static_cast<double>(sc));
        }
      }
      auto* dst = reinterpret_cast<uint16_t*>(out.weight.data()) + (r - r0) * ncols;
      const uint8_t* row = q + r * cols;
      for (int64_t c = c0; c < c1; ++c) {
        const uint8_t code = row[c];
        if ((code & 0x7F) == 0x7F) {  // E4M3 NaN
          double v;
          src.read_row(r, c, c + 1, &v);
        }
        uint16_t v = lut[(c / bs) * 256 + code];
        std::memcpy(dst + (c - c0), &v, 2);
      }
    }
    if (release_as_read) src.release_rows(a, b);
  }
  return out;
}

EncodedTensor encode_rows(const std::string& name, DType dtype, int64_t rows, int64_t cols, const RowSource& src,
                          EncodeStats* stats) {
  PhaseTotals* cast = stats ? &stats->encode : nullptr;
  EncodedTensor out;
  const int64_t band = kFp8BlockSize;
  MatrixR buf(std::min(band, rows), cols);
  if (dtype == DType::F8_E4M3) {
    const int64_t bc = (cols + band - 1) / band, br = (rows + band - 1) / band;
    out.weight.resize(static_cast<size_t>(rows * cols));
    out.scale_inv.resize(static_cast<size_t>(br * bc * 4));
    for (int64_t r0 = 0; r0 < rows; r0 += band) {
      const int64_t n = std::min(band, rows - r0);
      MatrixR m(n, cols);
      src(r0, r0 + n, m.data());
      ScopedPhase timed(cast, static_cast<uint64_t>(n * cols));
      const Fp8Block q = quantize_fp8_block(name, m);
      std::memcpy(out.weight.data() + r0 * cols, q.weight.bytes.data(), q.weight.bytes.size());
      std::memcpy(out.scale_inv.data() + (r0 / band) * bc * 4, q.scale_inv.bytes.data(), q.scale_inv.bytes.size());
    }
    return out;
  }
  const int bytes = dtype_bits(dtype) / 8;
  out.weight.resize(static_cast<size_t>(rows * cols * bytes));
  for (int64_t r0 = 0; r0 < rows; r0 += band) {
    const int64_t n = std::min(band, rows - r0);
    src(r0, r0 + n, buf.data());
    ScopedPhase timed(cast, static_cast<uint64_t>(n * cols * bytes));
    const double* v = buf.data();
    std::byte* dst = out.weight.data() + static_cast<size_t>(r0 * cols * bytes);
    const int64_t count = n * cols;
    if (dtype == DType::BF16) {
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t b = fast_double_to_bf16(v[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
    } else {
      for (int64_t i = 0; i < count; ++i) store_from_double(dtype, dst, static_cast<size_t>(i), v[i]);
    }
  }
  return out;
}

RowSource matrix_rows(const MatrixR& m) {
  return [&m](int64_t r0, int64_t r1, double* out) {
    std::memcpy(out, m.data() + r0 * m.cols(), static_cast<size_t>((r1 - r0) * m.cols()) * sizeof(double));
  };
}

}  // namespace mla::transform
