#pragma once
// FP4 KV-cache formats (SPEC section 4; UltraQuant section 5). Scalar references.
//
// MX-style: groups of kFp4Group = 32 values, E2M1 codes (two per byte, low nibble first, as
// core/dtype.hpp), one UE8M0 byte b = E + 127 per group, value = e2m1(code) * 2^E.
// The exponent E from the group's absmax m (fp32) under one of three rules:
//   Round (UltraQuant): E = round(log2(c * m)), v = c*m in fp32; "round" is decided exactly
//                       on the mantissa: v = f * 2^e, f in [0.5, 1): E = e if f >= 2^-1/2,
//                       else e - 1 (ties, which cannot occur for fp32 f, go up).
//   OcpFloor (OCP MX):  E = floor(log2(m)) - 2       (2 = emax of E2M1)
//   Rceil:              E = ceil(log2(m / 6))        (smallest E with 6 * 2^E >= m)
// E is clamped to [-127, 127]; a group of zeros (m = 0) gets b = 0 and zero codes.
// Codes: E2M1(x / 2^E) round-to-nearest-even, saturating at +-6 (the division is exact).
//
// NVFP4-like: groups of 16, one E4M3 scale byte s8 = E4M3(m / 6); value = e2m1 * e4m3(s8);
// a scale that decodes to 0 gives zero codes. (No second-level per-tensor scale.)
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mla::quant {

inline constexpr std::size_t kFp4Group = 32;
inline constexpr std::size_t kNvfp4Group = 16;
// UltraQuant's published constant.
inline constexpr double kUltraQuantC = 0.156;

enum class Fp4ScaleRule { Round, OcpFloor, Rceil };
std::string_view fp4_rule_name(Fp4ScaleRule r);  // "round", "ocp_floor", "rceil"

// The UE8M0 byte for a group with absmax m (c is used by Round only).
uint8_t fp4_scale_byte(float absmax, Fp4ScaleRule rule, float c);

// n must be a multiple of 32 (InputError otherwise). codes: n/2 bytes, scales: n/32 bytes.
void encode_fp4_mx(const float* x, std::size_t n, Fp4ScaleRule rule, float c, uint8_t* codes,
                   uint8_t* scales);
void decode_fp4_mx(const uint8_t* codes, const uint8_t* scales, std::size_t n, float* out);

// n must be a multiple of 16. codes: n/2 bytes, scales: n/16 E4M3 bytes.
void encode_nvfp4(const float* x, std::size_t n, uint8_t* codes, uint8_t* scales);
void decode_nvfp4(const uint8_t* codes, const uint8_t* scales, std::size_t n, float* out);

// Sum of squared reconstruction errors (float64) of the formats above over n values, without
// packing (same rounding as encode+decode). Used by the constant fit and the reports.
double fp4_mx_sq_error(const float* x, std::size_t n, Fp4ScaleRule rule, float c);
double nvfp4_sq_error(const float* x, std::size_t n);
// Continuous (not power-of-two) scale s = c*m: the rule UltraQuant's c = 0.156 was fitted with.
double fp4_continuous_sq_error(const float* x, std::size_t n, double c);
// Symmetric uniform INT4 (levels -7..7) with a per-32 absmax/7 scale, for comparison.
double int4_group_sq_error(const float* x, std::size_t n);

}  // namespace mla::quant
