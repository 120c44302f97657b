#pragma once
// verify-decode --kv fp4 | codebook: each rank's cache in the 4-bit paged formats
// (docs/formats/kv-fp4.md), written by the append twins (quant/fp4_cache_format.hpp,
// quant/codebook_cache_format.hpp) with the layer's parameters (transform/kv4_params.hpp: the
// calibrated c or an override, the rule, the codebook in RMS units), then decoded by one of two
// routes (--kv4-route), each the CPU twin of a GPU kernel:
//   bf16  the written slots dequantised to a BF16 paged cache with the same page ids, decoded by
//         the unchanged BF16 decode twin (GPU: kernels/kv4_decode.hpp mla_decode_kv4);
//   fp8   FP4 only: the written pages converted to FP8 pages (quant::fp4_cache_to_fp8) and
//         decoded by the FP8 decode twin, the query quantised per row as the bf16q entry does
//         (GPU: kernels/fp8_decode.hpp fp8_decode_fp4_cache_bf16q, bit for bit the FP8 kernel on
//         the converted pages; that kernel equals the FP8 twin to its own tolerance).
// Layers calib.h5 protects keep a BF16 cache (either route). The backend learns the layer
// through DecodeBackend::begin_layer (verify_decode.cpp calls it before a layer's caches are
// created).
#include <memory>
#include <string>
#include <vector>

#include "transform/kv4_params.hpp"
#include "verify/decode_backend.hpp"

namespace mla::verify {

// Kernel-vs-float64-path bounds for the 4-bit formats, from the 4-bit grids (derivation in
// tests/verify/test_kv4_backend.cpp and docs/benchmarks.md, "4-bit KV cache (issue 12)"):
// per value the grid's relative RMS error is eps ~ 0.10 (E2M1 with a power-of-two scale per 32,
// the fitted c; calib.h5's holdout_rel_mse ~ 0.01) or ~ 0.09 (16-level Lloyd-Max, Gaussian
// MSE 0.0095); an attention output inherits it through the values (P.V averages independent
// errors, the rows it averages are as large as the output's norm for peaked softmax) and through
// the logits (q.k errors of relative size eps / sqrt(d_c/32 groups) each). 2.5 eps covers both
// with margin on the tiny models: 0.25; cosine difference ~ rel_l2^2 / 2 = 0.031.
constexpr double kKv4KernelRelL2 = 0.25;
constexpr double kKv4CosDiff = 0.032;

// The decode route of a 4-bit cache (--kv4-route).
enum class Kv4Route { Bf16, Fp8 };
// "bf16", "fp8": the --kv4-route names, for help and checks.
const std::vector<std::string>& kv4_route_names();
// InputError naming the value unless it is one of kv4_route_names().
Kv4Route parse_kv4_route(const std::string& name);
const char* kv4_route_name(Kv4Route route);

// The fp8 route's bounds. Its cache is the 4-bit grid exactly (fp4_cache_to_fp8 is exact while a
// token's group exponents span <= 11 octaves, docs/formats/kv-fp4.md), so it adds to the grid's
// error only the FP8 decode's own roundings: the query in E4M3 per row (relative 2^-4 at most per
// value, ~0.03 RMS), P re-quantised to E4M3 per 64-token block (the same), the fp32 softmax and,
// on the GPU, wgmma's shorter accumulation (<= 5e-3 relative L2 from the twin, test_fp8_gpu.cpp).
// Those are what kFp8KernelRelL2 = 0.08 bounds for the FP8 cache (which also covers the cache's
// own E4M3 rounding, absent here); they are independent of the grid's error, so the two add in
// quadrature: sqrt(0.25^2 + 0.08^2) = 0.2625 -> 0.27; cosine difference ~ rel_l2^2 / 2 = 0.036.
// Measured: the fp8 route's relative L2 to float64 is 0.2-3% above the bf16 route's on
// tests/verify/test_kv4_fp8_route.cpp's problems (0.11-0.16) and 0.5-0.8% above on tiny-v2's
// quantised layers in verify-decode (0.07-0.09): the grid dominates.
constexpr double kKv4Fp8RouteKernelRelL2 = 0.27;
constexpr double kKv4Fp8RouteCosDiff = 0.037;

// The CPU backend for params.format (fp4 or codebook) on a route; InputError for the codebook on
// the fp8 route (the FP8 route reads FP4 pages only).
std::unique_ptr<DecodeBackend> make_cpu_kv4_backend(const transform::Kv4Params& params,
                                                    Kv4Route route = Kv4Route::Bf16);
// The GPU backend (kv4_backend_cuda.cpp, written with the kernels); throws without them.
std::unique_ptr<DecodeBackend> make_cuda_kv4_backend(const transform::Kv4Params& params,
                                                     Kv4Route route = Kv4Route::Bf16);

}  // namespace mla::verify
