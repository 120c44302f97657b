#pragma once
// FP8 KV-cache formats (SPEC section 4; SnapMLA Table 2). Scalar references: the oracle of
// the GPU kernels and of the calibration FP8 study.
//
// RoPE-aware per-token (the project's FP8 format), per token row:
//   s      = max(amax(x), kFp8MinAmax) / 448            fp32 arithmetic
//   x8[i]  = E4M3(x[i] / s)                             fp32 division, RNE, saturating
//   kpe[i] = BF16(k_pe[i] / s)                          k_pe stored pre-divided by s
//   decode: x[i] = e4m3(x8[i]) * s, k_pe[i] = bf16(kpe[i]) * s   (fp32 products)
// 512 + 4 + 128 = 644 bytes per token at d_c = 512, d_r = 64.
//
// Study configurations (quantise-dequantise of a whole cache, SnapMLA Table 2):
//   RopeAware : the format above.
//   A         : per-token, RoPE-unaware: [x ; k_pe] share one scale amax/448, all E4M3.
//   B         : per-tensor static scale 1.0 on x (saturates at +-448); k_pe BF16.
//   C         : per-tensor dynamic: one scale amax(x over the whole cache)/448; k_pe BF16.
//   D         : per-block: x tiled into kFp8BlockTokens x kFp8BlockChannels blocks, one
//               scale amax(block)/448 each; k_pe BF16.
// In B, C and D "w/o quantisation" of k_pe means BF16, the cache's storage type.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/tensor.hpp"

namespace mla::quant {

inline constexpr float kE4M3Max = 448.0f;
// Floor on amax so an all-zero row gets a finite, non-zero scale.
inline constexpr float kFp8MinAmax = 1e-12f;
// Config D's block: 64 tokens (one FlashMLA page) by 64 latent channels.
inline constexpr int kFp8BlockTokens = 64;
inline constexpr int kFp8BlockChannels = 64;

// Per-token scale of the RoPE-aware format for one row of d_c values.
float fp8_token_scale(const float* x, std::size_t d_c);
// Encodes one token. x8: d_c bytes, kpe_bf16: d_r values. Returns the scale s.
float encode_fp8_rope_aware(const float* x, std::size_t d_c, const float* k_pe, std::size_t d_r,
                            uint8_t* x8, uint16_t* kpe_bf16);
void decode_fp8_rope_aware(const uint8_t* x8, std::size_t d_c, const uint16_t* kpe_bf16,
                           std::size_t d_r, float scale, float* x, float* k_pe);

enum class Fp8Config { RopeAware, A, B, C, D };
inline constexpr Fp8Config kAllFp8Configs[] = {Fp8Config::RopeAware, Fp8Config::A, Fp8Config::B,
                                               Fp8Config::C, Fp8Config::D};
// "rope_aware", "A_per_token_rope_unaware", "B_per_tensor_static", "C_per_tensor_dynamic",
// "D_per_block".
std::string_view fp8_config_name(Fp8Config c);

// Quantise-dequantise a cache (x [L, d_c], k_pe [L, d_r]) under one configuration; values
// pass through fp32 first (the cache's working precision). Outputs have the input shapes.
void fake_quant_fp8_cache(Fp8Config config, const MatrixR& x, const MatrixR& k_pe, MatrixR& x_out,
                          MatrixR& k_pe_out);

}  // namespace mla::quant
