#include "quant/fp8_kv.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.hpp"

namespace mla::quant {

float fp8_token_scale(const float* x, std::size_t d_c) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < d_c; ++i) amax = std::max(amax, std::fabs(x[i]));
  return std::max(amax, kFp8MinAmax) / kE4M3Max;
}

float encode_fp8_rope_aware(const float* x, std::size_t d_c, const float* k_pe, std::size_t d_r,
                            uint8_t* x8, uint16_t* kpe_bf16) {
  const float s = fp8_token_scale(x, d_c);
  for (std::size_t i = 0; i < d_c; ++i) x8[i] = float_to_e4m3(x[i] / s);
  for (std::size_t i = 0; i < d_r; ++i) kpe_bf16[i] = float_to_bf16(k_pe[i] / s);
  return s;
}

void decode_fp8_rope_aware(const uint8_t* x8, std::size_t d_c, const uint16_t* kpe_bf16,
                           std::size_t d_r, float scale, float* x, float* k_pe) {
  for (std::size_t i = 0; i < d_c; ++i) x[i] = e4m3_to_float(x8[i]) * scale;
  for (std::size_t i = 0; i < d_r; ++i) k_pe[i] = bf16_to_float(kpe_bf16[i]) * scale;
}

std::string_view fp8_config_name(Fp8Config c) {
  switch (c) {
    case Fp8Config::RopeAware: return "rope_aware";
    case Fp8Config::A: return "A_per_token_rope_unaware";
    case Fp8Config::B: return "B_per_tensor_static";
    case Fp8Config::C: return "C_per_tensor_dynamic";
    case Fp8Config::D: return "D_per_block";
  }
  return "?";
}

namespace {

// E4M3 round trip of v under scale s (fp32 arithmetic, as the encoder).
inline double q8(double v, float s) {
  return static_cast<double>(e4m3_to_float(float_to_e4m3(static_cast<float>(v) / s)) * s);
}
inline double bf16_round(double v) {
  return static_cast<double>(bf16_to_float(float_to_bf16(static_cast<float>(v))));
}
inline float amax_of(const MatrixR& m, Eigen::Index r0, Eigen::Index r1, Eigen::Index c0,
                     Eigen::Index c1) {
  float a = 0.0f;
  for (Eigen::Index r = r0; r < r1; ++r)
    for (Eigen::Index c = c0; c < c1; ++c) a = std::max(a, std::fabs(static_cast<float>(m(r, c))));
  return a;
}

}  // namespace

void fake_quant_fp8_cache(Fp8Config config, const MatrixR& x, const MatrixR& k_pe, MatrixR& x_out,
                          MatrixR& k_pe_out) {
  const Eigen::Index L = x.rows(), dc = x.cols(), dr = k_pe.cols();
  x_out.resize(L, dc);
  k_pe_out.resize(L, dr);
  switch (config) {
    case Fp8Config::RopeAware: {
      std::vector<float> xf(dc), kf(dr), xo(dc), ko(dr);
      std::vector<uint8_t> x8(dc);
      std::vector<uint16_t> kb(dr);
      for (Eigen::Index t = 0; t < L; ++t) {
        for (Eigen::Index i = 0; i < dc; ++i) xf[i] = static_cast<float>(x(t, i));
        for (Eigen::Index i = 0; i < dr; ++i) kf[i] = static_cast<float>(k_pe(t, i));
        const float s = encode_fp8_rope_aware(xf.data(), dc, kf.data(), dr, x8.data(), kb.data());
        decode_fp8_rope_aware(x8.data(), dc, kb.data(), dr, s, xo.data(), ko.data());
        for (Eigen::Index i = 0; i < dc; ++i) x_out(t, i) = xo[i];
        for (Eigen::Index i = 0; i < dr; ++i) k_pe_out(t, i) = ko[i];
      }
      return;
    }
    case Fp8Config::A:
      for (Eigen::Index t = 0; t < L; ++t) {
        const float amax = std::max(amax_of(x, t, t + 1, 0, dc), amax_of(k_pe, t, t + 1, 0, dr));
        const float s = std::max(amax, kFp8MinAmax) / kE4M3Max;
        for (Eigen::Index i = 0; i < dc; ++i) x_out(t, i) = q8(x(t, i), s);
        for (Eigen::Index i = 0; i < dr; ++i) k_pe_out(t, i) = q8(k_pe(t, i), s);
      }
      return;
    case Fp8Config::B:
    case Fp8Config::C: {
      const float s = config == Fp8Config::B
                          ? 1.0f
                          : std::max(amax_of(x, 0, L, 0, dc), kFp8MinAmax) / kE4M3Max;
      for (Eigen::Index t = 0; t < L; ++t)
        for (Eigen::Index i = 0; i < dc; ++i) x_out(t, i) = q8(x(t, i), s);
      break;
    }
    case Fp8Config::D:
      for (Eigen::Index t0 = 0; t0 < L; t0 += kFp8BlockTokens) {
        const Eigen::Index t1 = std::min<Eigen::Index>(L, t0 + kFp8BlockTokens);
        for (Eigen::Index c0 = 0; c0 < dc; c0 += kFp8BlockChannels) {
          const Eigen::Index c1 = std::min<Eigen::Index>(dc, c0 + kFp8BlockChannels);
          const float s = std::max(amax_of(x, t0, t1, c0, c1), kFp8MinAmax) / kE4M3Max;
          for (Eigen::Index t = t0; t < t1; ++t)
            for (Eigen::Index i = c0; i < c1; ++i) x_out(t, i) = q8(x(t, i), s);
        }
      }
      break;
  }
  // B, C, D keep k_pe in BF16.
  for (Eigen::Index t = 0; t < L; ++t)
    for (Eigen::Index i = 0; i < dr; ++i) k_pe_out(t, i) = bf16_round(k_pe(t, i));
}

}  // namespace mla::quant
