#include "core/dtype.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace mla {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
  bool is_float;
};

constexpr std::array<DTypeInfo, 17> kInfo{{
    {DType::BOOL, "BOOL", 8, false},     {DType::U8, "U8", 8, false},
    {DType::I8, "I8", 8, false},         {DType::U16, "U16", 16, false},
    {DType::I16, "I16", 16, false},      {DType::U32, "U32", 32, false},
    {DType::I32, "I32", 32, false},      {DType::U64, "U64", 64, false},
    {DType::I64, "I64", 64, false},      {DType::F8_E4M3, "F8_E4M3", 8, true},
    {DType::F8_E5M2, "F8_E5M2", 8, true}, {DType::F8_E8M0, "F8_E8M0", 8, true},
    {DType::F4, "F4", 4, true},          {DType::F16, "F16", 16, true},
    {DType::BF16, "BF16", 16, true},     {DType::F32, "F32", 32, true},
    {DType::F64, "F64", 64, true},
}};

const DTypeInfo& info(DType t) { return kInfo.at(static_cast<size_t>(t)); }

// A small binary float format: sign bit, ebits exponent, mbits mantissa.
struct MiniFloat {
  int ebits;
  int mbits;
  int bias;
  bool ieee_special;     // top exponent is inf/NaN (F16, E5M2)
  bool has_sign = true;
};

constexpr MiniFloat kF16{5, 10, 15, true};
constexpr MiniFloat kBF16{8, 7, 127, true};
constexpr MiniFloat kE4M3{4, 3, 7, false};
constexpr MiniFloat kE5M2{5, 2, 15, true};
constexpr MiniFloat kE2M1{2, 1, 1, false};

double minifloat_max(const MiniFloat& f) {
  const int top_exp = (1 << f.ebits) - 1;
  if (f.ieee_special) {
    return std::ldexp(2.0 - std::ldexp(1.0, -f.mbits), top_exp - 1 - f.bias);
  }
  if (f.ebits == 4 && f.mbits == 3) return 448.0;  // E4M3fn: S.1111.111 is NaN
  return std::ldexp(2.0 - std::ldexp(1.0, -f.mbits), top_exp - f.bias);  // E2M1: 6
}

double minifloat_decode(const MiniFloat& f, uint32_t bits) {
  const uint32_t mmask = (1u << f.mbits) - 1;
  const uint32_t emask = (1u << f.ebits) - 1;
  const uint32_t mant = bits & mmask;
  const uint32_t exp = (bits >> f.mbits) & emask;
  const bool neg = f.has_sign && ((bits >> (f.mbits + f.ebits)) & 1u);
  double v;
  if (f.ieee_special && exp == emask) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!f.ieee_special && f.ebits == 4 && f.mbits == 3 && exp == emask && mant == mmask) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - f.bias - f.mbits);
  } else {
    v = std::ldexp(static_cast<double>(mant + (1u << f.mbits)), static_cast<int>(exp) - f.bias - f.mbits);
  }
  return neg ? -v : v;
}

// Round-to-nearest-even encode. Finite-only formats saturate; IEEE formats overflow to inf.
uint32_t minifloat_encode(const MiniFloat& f, double x, uint32_t nan_code) {
  const uint32_t sign = (std::signbit(x) ? 1u : 0u) << (f.mbits + f.ebits);
  if (std::isnan(x)) return nan_code;
  double a = std::fabs(x);
  const double maxv = minifloat_max(f);
  const int emin = 1 - f.bias;
  const uint32_t emask = (1u << f.ebits) - 1;
  if (std::isinf(a)) {
    return f.ieee_special ? (sign | (emask << f.mbits)) : (sign | minifloat_encode(f, maxv, nan_code));
  }
  if (a == 0.0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  e -= 1;             // a = m' * 2^e, m' in [1, 2)
  const int qexp = (e < emin ? emin : e) - f.mbits;
  double r = std::nearbyint(std::ldexp(a, -qexp));  // default rounding mode: ties to even
  double v = std::ldexp(r, qexp);
  if (v > maxv) {
    if (f.ieee_special) return sign | (emask << f.mbits);
    v = maxv;
  }
  if (v == 0.0) return sign;
  uint32_t code;
  if (v < std::ldexp(1.0, emin)) {
    code = static_cast<uint32_t>(std::ldexp(v, f.bias - 1 + f.mbits));  // subnormal
  } else {
    std::frexp(v, &e);
    e -= 1;
    const uint32_t mant = static_cast<uint32_t>(std::ldexp(v, f.mbits - e)) - (1u << f.mbits);
    code = (static_cast<uint32_t>(e + f.bias) << f.mbits) | mant;
  }
  return sign | code;
}

template <typename T>
T load(const void* p, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store(void* p, size_t i, T v) {
  std::memcpy(static_cast<char*>(p) + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

int dtype_bits(DType t) { return info(t).bits; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

uint16_t double_to_bf16(double v) {
  return static_cast<uint16_t>(minifloat_encode(kBF16, v, 0x7FC0u));
}

uint16_t fast_double_to_bf16(double v) {
  const double a = std::fabs(v);
  // Normal BF16 range below 2^127 (no overflow possible): round the double's mantissa to 7 bits
  // (ties to even) in the integer domain; the result is then exact as a float.
  if (a >= 0x1p-126 && a < 0x1p127) {
    uint64_t bits = std::bit_cast<uint64_t>(v);
    bits += ((uint64_t{1} << 44) - 1) + ((bits >> 45) & 1);
    bits &= ~((uint64_t{1} << 45) - 1);
    const float f = static_cast<float>(std::bit_cast<double>(bits));  // exact: 8 significant bits, in range
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
  }
  return double_to_bf16(v);
}

float f16_to_float(uint16_t h) { return static_cast<float>(minifloat_decode(kF16, h)); }
uint16_t float_to_f16(float f) { return static_cast<uint16_t>(minifloat_encode(kF16, f, 0x7E00u)); }
float e4m3_to_float(uint8_t v) { return static_cast<float>(minifloat_decode(kE4M3, v)); }
uint8_t float_to_e4m3(float f) { return static_cast<uint8_t>(minifloat_encode(kE4M3, f, 0x7Fu)); }
float e5m2_to_float(uint8_t v) { return static_cast<float>(minifloat_decode(kE5M2, v)); }
uint8_t float_to_e5m2(float f) { return static_cast<uint8_t>(minifloat_encode(kE5M2, f, 0x7Eu)); }
float e2m1_to_float(uint8_t code) { return static_cast<float>(minifloat_decode(kE2M1, code & 0xFu)); }
uint8_t float_to_e2m1(float f) { return static_cast<uint8_t>(minifloat_encode(kE2M1, f, 0x7u)); }

float ue8m0_to_float(uint8_t v) {
  if (v == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(v) - 127);
}

double load_as_double(DType t, const void* d, size_t i) {
  switch (t) {
    case DType::BOOL: return load<uint8_t>(d, i) ? 1.0 : 0.0;
    case DType::U8: return load<uint8_t>(d, i);
    case DType::I8: return load<int8_t>(d, i);
    case DType::U16: return load<uint16_t>(d, i);
    case DType::I16: return load<int16_t>(d, i);
    case DType::U32: return load<uint32_t>(d, i);
    case DType::I32: return load<int32_t>(d, i);
    case DType::U64: return static_cast<double>(load<uint64_t>(d, i));
    case DType::I64: return static_cast<double>(load<int64_t>(d, i));
    case DType::F8_E4M3: return e4m3_to_float(load<uint8_t>(d, i));
    case DType::F8_E5M2: return e5m2_to_float(load<uint8_t>(d, i));
    case DType::F8_E8M0: return ue8m0_to_float(load<uint8_t>(d, i));
    case DType::F4: {
      const uint8_t byte = load<uint8_t>(d, i / 2);
      return e2m1_to_float((i % 2) ? (byte >> 4) : (byte & 0xF));
    }
    case DType::F16: return f16_to_float(load<uint16_t>(d, i));
    case DType::BF16: return bf16_to_float(load<uint16_t>(d, i));
    case DType::F32: return load<float>(d, i);
    case DType::F64: return load<double>(d, i);
  }
  throw std::logic_error("load_as_double: bad dtype");
}

void store_from_double(DType t, void* d, size_t i, double v) {
  switch (t) {
    case DType::BOOL: store<uint8_t>(d, i, v != 0.0); return;
    case DType::U8: store<uint8_t>(d, i, static_cast<uint8_t>(v)); return;
    case DType::I8: store<int8_t>(d, i, static_cast<int8_t>(v)); return;
    case DType::U16: store<uint16_t>(d, i, static_cast<uint16_t>(v)); return;
    case DType::I16: store<int16_t>(d, i, static_cast<int16_t>(v)); return;
    case DType::U32: store<uint32_t>(d, i, static_cast<uint32_t>(v)); return;
    case DType::I32: store<int32_t>(d, i, static_cast<int32_t>(v)); return;
    case DType::U64: store<uint64_t>(d, i, static_cast<uint64_t>(v)); return;
    case DType::I64: store<int64_t>(d, i, static_cast<int64_t>(v)); return;
    // Narrow formats round straight from double (no double rounding through float); for a
    // float input this is the same as the float encoders above.
    case DType::F8_E4M3: store<uint8_t>(d, i, static_cast<uint8_t>(minifloat_encode(kE4M3, v, 0x7Fu))); return;
    case DType::F8_E5M2: store<uint8_t>(d, i, static_cast<uint8_t>(minifloat_encode(kE5M2, v, 0x7Eu))); return;
    case DType::F8_E8M0: {
      // Nearest power of two in log space is a scale-rule decision; callers that need a
      // rule (floor, round, ceil) compute the byte themselves. Here: exact powers only.
      int e;
      const double m = std::frexp(v, &e);
      if (!(v > 0) || m != 0.5) throw std::invalid_argument("store F8_E8M0: not a power of two");
      store<uint8_t>(d, i, static_cast<uint8_t>(e - 1 + 127));
      return;
    }
    case DType::F4: {
      uint8_t* bytes = static_cast<uint8_t*>(d);
      const uint8_t code = static_cast<uint8_t>(minifloat_encode(kE2M1, v, 0x7u));
      uint8_t& b = bytes[i / 2];
      b = (i % 2) ? static_cast<uint8_t>((b & 0x0F) | (code << 4)) : static_cast<uint8_t>((b & 0xF0) | code);
      return;
    }
    case DType::F16: store<uint16_t>(d, i, static_cast<uint16_t>(minifloat_encode(kF16, v, 0x7E00u))); return;
    case DType::BF16: store<uint16_t>(d, i, double_to_bf16(v)); return;
    case DType::F32: store<float>(d, i, static_cast<float>(v)); return;
    case DType::F64: store<double>(d, i, v); return;
  }
  throw std::logic_error("store_from_double: bad dtype");
}

}  // namespace mla
