#pragma once
// FP4 cache pages re-expressed as FP8 cache pages (docs/formats/kv-fp4.md, "Decoding on FP8 tensor
// cores"): what the FP8-tensor-core route of the 4-bit decode (kernels/fp8_decode_narrow.cu and
// fp8_decode_rows64.cu with an FP4 cache) writes into shared memory per tile, here for whole
// pages, so the CPU twin of that route is this conversion followed by the FP8 decode twin
// (quant/fp8_decode_twin.hpp).
//
// Per token, with b_g its UE8M0 bytes (value_i = e2m1_i * 2^(b_g - 127)):
//   E = max(max_g b_g - 127, -40)            (-40: as the FP8 format's tiny amax, a token of
//                                             zeros or near-zeros keeps a usable scale)
//   s = 2^(E - 6)                            the FP8 token scale (fp32)
//   x8_i = E4M3_RNE_sat(e2m1_i * 2^(b_g - 127 - E + 6))   exact whenever b_g >= max b - 11
//                                             (e2m1 * 2^k with k in [-5, 6] is an E4M3 normal)
//   k_pe'_i = BF16_RNE(k_pe_i * 2^(6 - E))    (= k_pe / s, exact in range)
// so x8 * s = the FP4 value (exactly, in that range) and k_pe' * s = k_pe. A poisoned token (any
// b_g = 255) becomes the FP8 poisoned token: scale NaN, every other byte zero.
#include <cstdint>

#include "quant/fp4_cache_layout.hpp"

namespace mla::quant {

// The exponent floor of E above.
inline constexpr int kFp4ToFp8MinExponent = -40;

// Every slot of num_pages FP4 pages (layout l) -> FP8 pages of the same page size, d_c, d_r
// (Fp8CacheLayout{l.page_size, l.d_c, l.d_r}), same page ids. Throws InputError for a layout
// neither format can hold.
void fp4_cache_to_fp8(const Fp4CacheLayout& l, const uint8_t* fp4_pages, int num_pages, uint8_t* fp8_pages);

}  // namespace mla::quant
