#include "core/fp8_block.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace mla {

const std::array<double, 256>& e4m3_values() {
  static const std::array<double, 256> table = [] {
    std::array<double, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = e4m3_to_float(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

uint8_t fast_double_to_e4m3(double x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  if (a < 0.015625) {  // below 2^-6: subnormal grid of step 2^-9 (code 8 is the smallest normal)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0));
  }
  if (a >= 464.0) return sign | 0x7E;  // 464 ties to 448 (even); above it saturates
  uint64_t u = std::bit_cast<uint64_t>(a);
  constexpr int kDrop = 52 - 3;  // keep 3 mantissa bits
  u += ((uint64_t{1} << (kDrop - 1)) - 1) + ((u >> kDrop) & 1u);  // RNE; a carry bumps the exponent
  const int exp = static_cast<int>(u >> 52) - 1023;                 // in [-6, 8]
  const uint32_t mant = static_cast<uint32_t>((u >> kDrop) & 0x7u);
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | mant);
}

void dequantize_fp8_row(const uint8_t* codes, const std::byte* scales, int64_t c0, int64_t c1, double* out) {
  const auto& table = e4m3_values();
  for (int64_t c = c0; c < c1;) {
    const int64_t blk = c / kFp8BlockSize, end = std::min(c1, (blk + 1) * kFp8BlockSize);
    float s;
    std::memcpy(&s, scales + blk * 4, 4);
    const double sd = s;
    for (; c < end; ++c) out[c - c0] = table[codes[c]] * sd;
  }
}

Fp8Block quantize_fp8_block(const std::string& name, const MatrixR& w) {
  const int64_t rows = w.rows(), cols = w.cols();
  const Shape sshape = fp8_scale_shape(rows, cols);
  const int64_t br = sshape[0], bc = sshape[1];
  Fp8Block out;
  out.weight = OwnedTensor{name, DType::F8_E4M3, {rows, cols}, std::vector<std::byte>(static_cast<size_t>(rows * cols))};
  out.scale_inv = OwnedTensor{name + "_scale_inv", DType::F32, sshape, std::vector<std::byte>(static_cast<size_t>(br * bc * 4))};
  auto* q = reinterpret_cast<uint8_t*>(out.weight.bytes.data());
  for (int64_t bi = 0; bi < br; ++bi) {
    const int64_t r0 = bi * kFp8BlockSize, r1 = std::min(rows, r0 + kFp8BlockSize);
    for (int64_t bj = 0; bj < bc; ++bj) {
      const int64_t c0 = bj * kFp8BlockSize, c1 = std::min(cols, c0 + kFp8BlockSize);
      double amax = 0.0;
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) {
          const double x = w(i, j);
          if (!std::isfinite(x))
            throw InputError("quantize_fp8_block: tensor '" + name + "' has non-finite value " + std::to_string(x) +
                             " at [" + std::to_string(i) + ", " + std::to_string(j) + "]");
          amax = std::max(amax, std::fabs(x));
        }
      // The scale is stored as float; dividing by that float (not amax/448 in double) keeps
      // quantise and dequantise consistent. An all-zero block gets scale 1.
      const float s = amax > 0.0 ? static_cast<float>(amax / 448.0) : 1.0f;
      std::memcpy(out.scale_inv.bytes.data() + (bi * bc + bj) * 4, &s, 4);
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) q[i * cols + j] = fast_double_to_e4m3(w(i, j) / static_cast<double>(s));
    }
  }
  return out;
}

MatrixR dequantize_fp8_block(const TensorView& weight, const TensorView& scale_inv, const std::string& name) {
  if (weight.dtype != DType::F8_E4M3 || weight.shape.size() != 2)
    throw InputError("dequantize_fp8_block: tensor '" + name + "' is " + std::string(dtype_name(weight.dtype)) + " " +
                     shape_to_string(weight.shape) + ", expected a 2-D F8_E4M3 weight");
  const int64_t rows = weight.shape[0], cols = weight.shape[1];
  const Shape want = fp8_scale_shape(rows, cols);
  if (scale_inv.dtype != DType::F32 || scale_inv.shape != want)
    throw InputError("dequantize_fp8_block: scale tensor '" + name + "_scale_inv' is " +
                     std::string(dtype_name(scale_inv.dtype)) + " " + shape_to_string(scale_inv.shape) +
                     ", expected F32 " + shape_to_string(want) + " for weight " + shape_to_string(weight.shape));
  if (weight.bytes.size() != static_cast<size_t>(rows * cols) || scale_inv.bytes.size() != static_cast<size_t>(want[0] * want[1] * 4))
    throw InputError("dequantize_fp8_block: tensor '" + name + "' byte size does not match its shape");
  const auto* q = reinterpret_cast<const uint8_t*>(weight.bytes.data());
  MatrixR out(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    dequantize_fp8_row(q + i * cols, scale_inv.bytes.data() + (i / kFp8BlockSize) * want[1] * 4, 0, cols,
                       out.data() + i * cols);
  return out;
}

}  // namespace mla
