#pragma once
// verify-decode --kv fp4 | codebook: each rank's cache in the 4-bit paged formats
// (docs/formats/kv-fp4.md), written by the append twins (quant/fp4_cache_format.hpp,
// quant/codebook_cache_format.hpp) with the layer's parameters (transform/kv4_params.hpp: the
// calibrated c or an override, the rule, the codebook in RMS units), dequantised to a BF16
// paged cache with the same page ids and decoded by the unchanged BF16 decode twin: the
// rounding points the GPU kernel shares. Layers calib.h5 protects keep a BF16 cache.
// The backend learns the layer through DecodeBackend::begin_layer (verify_decode.cpp calls it
// before a layer's caches are created).
#include <memory>
#include <string>

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

// The CPU backend for params.format (fp4 or codebook).
std::unique_ptr<DecodeBackend> make_cpu_kv4_backend(const transform::Kv4Params& params);
// The GPU backend (kv4_backend_cuda.cpp, written with the kernels); throws without them.
std::unique_ptr<DecodeBackend> make_cuda_kv4_backend(const transform::Kv4Params& params);

}  // namespace mla::verify
