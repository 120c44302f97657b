#pragma once
// Element types of the safetensors format and of our KV cache formats, with exact scalar
// conversions. These scalar routines are the oracle for every vectorised/GPU path:
// encoders round to nearest, ties to even, as the hardware conversion instructions do.
//
//   BF16     1-8-7,  bias 127, IEEE semantics (inf, NaN)
//   F16      1-5-10, bias 15,  IEEE semantics
//   F8_E4M3  1-4-3,  bias 7,   "fn" variant: no inf, NaN = S.1111.111, max finite 448
//   F8_E5M2  1-5-2,  bias 15,  IEEE semantics, max finite 57344
//   F8_E8M0  0-8-0,  unsigned exponent 2^(e-127), 0xFF = NaN (OCP MX "UE8M0" scale)
//   F4 E2M1  1-2-1,  bias 1,   values {0,0.5,1,1.5,2,3,4,6}, two per byte, low nibble first
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mla {

enum class DType : uint8_t {
  BOOL, U8, I8, U16, I16, U32, I32, U64, I64,
  F8_E4M3, F8_E5M2, F8_E8M0, F4, F16, BF16, F32, F64,
};

// Bits per element (F4 = 4; everything else a whole number of bytes).
int dtype_bits(DType t);
// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
// Parses the safetensors spelling; std::nullopt for an unknown name.
std::optional<DType> parse_dtype(std::string_view name);
bool dtype_is_float(DType t);

// ---- scalar conversions (exact; round-to-nearest-even on encode) ----
// BF16 is the top half of a float32: widening is a shift (inline: the calibration's moment
// loops call it per element).
inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
// Round to nearest even (the rounding of torch, XLA and vcvtneps2bf16); Inf stays Inf, NaN
// becomes a quiet NaN of the same sign.
inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// Rounds a double straight to BF16 (no double rounding through float).
uint16_t double_to_bf16(double v);
// The same result as double_to_bf16, faster on the normal range (integer rounding of the
// double's mantissa); the converter's BF16 encoder. Tests compare the two.
uint16_t fast_double_to_bf16(double v);
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float e4m3_to_float(uint8_t v);
// Saturates to +-448 (finite-only format); NaN maps to 0x7F.
uint8_t float_to_e4m3(float f);
float e5m2_to_float(uint8_t v);
uint8_t float_to_e5m2(float f);  // IEEE: overflow to inf
// UE8M0: 2^(v-127); 0xFF is NaN.
float ue8m0_to_float(uint8_t v);
// E2M1 code (low 4 bits) to value.
float e2m1_to_float(uint8_t code);
// Nearest E2M1 code, ties to even mantissa, saturating at +-6.
uint8_t float_to_e2m1(float f);

// Reads element i of a buffer of type t as double (F4: nibble i, low nibble first).
double load_as_double(DType t, const void* data, size_t i);
// Writes v into element i of a buffer of type t (rounding as the encoders above).
void store_from_double(DType t, void* data, size_t i, double v);

}  // namespace mla
