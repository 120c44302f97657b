#include "quant/fp4_kv.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace mla::quant {

std::string_view fp4_rule_name(Fp4ScaleRule r) {
  switch (r) {
    case Fp4ScaleRule::Round: return "round";
    case Fp4ScaleRule::OcpFloor: return "ocp_floor";
    case Fp4ScaleRule::Rceil: return "rceil";
  }
  return "?";
}

namespace {

void require_multiple(std::size_t n, std::size_t g, const char* what) {
  if (n % g != 0) {
    throw InputError(std::string(what) + ": length " + std::to_string(n) +
                     " is not a multiple of the group size " + std::to_string(g));
  }
}

float absmax_of(const float* x, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Exponent E of the rule (before clamping); m > 0 and finite.
int scale_exponent(float m, Fp4ScaleRule rule, float c) {
  switch (rule) {
    case Fp4ScaleRule::Round: {
      int e = 0;
      const float f = std::frexp(c * m, &e);  // c*m = f * 2^e, f in [0.5, 1)
      return static_cast<double>(f) >= 0.70710678118654752440 ? e : e - 1;
    }
    case Fp4ScaleRule::OcpFloor: {
      int e = 0;
      std::frexp(m, &e);  // floor(log2 m) = e - 1
      return (e - 1) - 2;
    }
    case Fp4ScaleRule::Rceil: {
      int e = 0;
      const double f = std::frexp(static_cast<double>(m) / 6.0, &e);
      return f == 0.5 ? e - 1 : e;  // exact power of two: ceil(log2) = log2
    }
  }
  return 0;
}

inline float ue8m0_value(uint8_t b) { return b == 0 ? std::ldexp(1.0f, -127) : ue8m0_to_float(b); }

}  // namespace

uint8_t fp4_scale_byte(float absmax, Fp4ScaleRule rule, float c) {
  if (!(absmax > 0.0f) || !std::isfinite(absmax)) return 0;
  const int e = std::clamp(scale_exponent(absmax, rule, c), -127, 127);
  return static_cast<uint8_t>(e + 127);
}

void encode_fp4_mx(const float* x, std::size_t n, Fp4ScaleRule rule, float c, uint8_t* codes,
                   uint8_t* scales) {
  require_multiple(n, kFp4Group, "encode_fp4_mx");
  std::fill(codes, codes + n / 2, uint8_t{0});
  for (std::size_t g = 0; g < n / kFp4Group; ++g) {
    const float* xg = x + g * kFp4Group;
    const uint8_t b = fp4_scale_byte(absmax_of(xg, kFp4Group), rule, c);
    scales[g] = b;
    if (b == 0) continue;
    const int e = static_cast<int>(b) - 127;
    for (std::size_t i = 0; i < kFp4Group; ++i) {
      const uint8_t code = float_to_e2m1(std::ldexp(xg[i], -e)) & 0xF;
      const std::size_t k = g * kFp4Group + i;
      codes[k / 2] |= static_cast<uint8_t>((k % 2) ? code << 4 : code);
    }
  }
}

void decode_fp4_mx(const uint8_t* codes, const uint8_t* scales, std::size_t n, float* out) {
  require_multiple(n, kFp4Group, "decode_fp4_mx");
  for (std::size_t k = 0; k < n; ++k) {
    const uint8_t code = (k % 2) ? codes[k / 2] >> 4 : codes[k / 2] & 0xF;
    out[k] = e2m1_to_float(code) * ue8m0_value(scales[k / kFp4Group]);
  }
}

void encode_nvfp4(const float* x, std::size_t n, uint8_t* codes, uint8_t* scales) {
  require_multiple(n, kNvfp4Group, "encode_nvfp4");
  std::fill(codes, codes + n / 2, uint8_t{0});
  for (std::size_t g = 0; g < n / kNvfp4Group; ++g) {
    const float* xg = x + g * kNvfp4Group;
    const uint8_t s8 = float_to_e4m3(absmax_of(xg, kNvfp4Group) / 6.0f);
    scales[g] = s8;
    const float s = e4m3_to_float(s8);
    if (!(s > 0.0f)) continue;
    for (std::size_t i = 0; i < kNvfp4Group; ++i) {
      const uint8_t code = float_to_e2m1(xg[i] / s) & 0xF;
      const std::size_t k = g * kNvfp4Group + i;
      codes[k / 2] |= static_cast<uint8_t>((k % 2) ? code << 4 : code);
    }
  }
}

void decode_nvfp4(const uint8_t* codes, const uint8_t* scales, std::size_t n, float* out) {
  require_multiple(n, kNvfp4Group, "decode_nvfp4");
  for (std::size_t k = 0; k < n; ++k) {
    const uint8_t code = (k % 2) ? codes[k / 2] >> 4 : codes[k / 2] & 0xF;
    const float s = e4m3_to_float(scales[k / kNvfp4Group]);
    out[k] = s > 0.0f ? e2m1_to_float(code) * s : 0.0f;
  }
}

namespace {

// Value of E2M1(v) (round to nearest, ties to the even code, saturating at +-6): the same
// result as e2m1_to_float(float_to_e2m1(v)) without the generic minifloat encoder, because the
// constant fit calls it ~10^8 times. Ties: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2,
// 3.5->4, 5->4 (even codes 0, 2, 4, 6). tests/quant checks it against encode+decode.
inline double e2m1_round(double v) {
  const double a = std::fabs(static_cast<float>(v));
  double q;
  if (a <= 0.25) q = 0.0;
  else if (a < 0.75) q = 0.5;
  else if (a <= 1.25) q = 1.0;
  else if (a < 1.75) q = 1.5;
  else if (a <= 2.5) q = 2.0;
  else if (a < 3.5) q = 3.0;
  else if (a <= 5.0) q = 4.0;
  else q = 6.0;
  return std::signbit(v) ? -q : q;
}

}  // namespace

namespace {
// Sum of squared errors over consecutive groups of `group` values: quantiser(xg) returns the
// dequantised value of xg[i] for one group (its scale computed once per group).
template <class Quantiser>
double group_sq_error(const float* x, std::size_t n, std::size_t group, const char* what, Quantiser quantiser) {
  require_multiple(n, group, what);
  double err = 0.0;
  for (std::size_t g = 0; g < n / group; ++g) {
    const float* xg = x + g * group;
    const auto q = quantiser(xg);
    for (std::size_t i = 0; i < group; ++i) {
      const double y = q(xg[i]);
      err += (y - xg[i]) * (y - xg[i]);
    }
  }
  return err;
}
}  // namespace

double fp4_mx_sq_error(const float* x, std::size_t n, Fp4ScaleRule rule, float c) {
  return group_sq_error(x, n, kFp4Group, "fp4_mx_sq_error", [&](const float* xg) {
    const uint8_t b = fp4_scale_byte(absmax_of(xg, kFp4Group), rule, c);
    const int e = static_cast<int>(b) - 127;
    return [b, e](float v) { return b == 0 ? 0.0 : std::ldexp(e2m1_round(std::ldexp(v, -e)), e); };
  });
}

double nvfp4_sq_error(const float* x, std::size_t n) {
  return group_sq_error(x, n, kNvfp4Group, "nvfp4_sq_error", [](const float* xg) {
    const float s = e4m3_to_float(float_to_e4m3(absmax_of(xg, kNvfp4Group) / 6.0f));
    return [s](float v) { return s > 0.0f ? e2m1_round(v / s) * s : 0.0; };
  });
}

double fp4_continuous_sq_error(const float* x, std::size_t n, double c) {
  return group_sq_error(x, n, kFp4Group, "fp4_continuous_sq_error", [c](const float* xg) {
    const double s = c * absmax_of(xg, kFp4Group);
    return [s](float v) { return s > 0.0 ? e2m1_round(v / s) * s : 0.0; };
  });
}

double int4_group_sq_error(const float* x, std::size_t n) {
  return group_sq_error(x, n, kFp4Group, "int4_group_sq_error", [](const float* xg) {
    const double s = absmax_of(xg, kFp4Group) / 7.0;
    return [s](float v) { return s > 0.0 ? std::clamp(std::nearbyint(v / s), -7.0, 7.0) * s : 0.0; };
  });
}

}  // namespace mla::quant
