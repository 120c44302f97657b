#pragma once
// verify-decode's KV-cache formats (--kv): decode backends that store each rank's cache in the
// FP8 format (quant/fp8_cache_format.hpp) and decode it with the FP8 kernel (--device cuda) or
// its CPU twin, and the SnapMLA study configurations through the BF16 decode.
//   bf16                the BF16 cache and decode (decode_backend.hpp)
//   fp8                 the paged FP8 cache (644 B/token at d_c = 512): append kernel / twin,
//                       query quantised per (token, head), FP8 decode kernel / twin
//   fp4, codebook       the 4-bit paged caches (verify/kv4_backend.hpp), with the layer
//                       parameters given to make_kv_backend, decoded on the --kv4-route
//                       (bf16: BF16 dequantisation; fp8, fp4 only: FP8 conversion, FP8 decode)
//   fp8-rope-aware, fp8-A, fp8-B, fp8-C, fp8-D
//                       SnapMLA Table 2 configurations (quant/fp8_kv.hpp): the BF16 cache is
//                       quantised and dequantised under the configuration (per request: C's
//                       tensor and D's 64-token blocks are the request's own cache) and decoded
//                       by the BF16 twin; the query stays BF16. Isolates each cache format's own
//                       error so their ordering can be compared on real decode outputs. CPU only.
// The FP8 format needs d_c to place bytes, which the backend interface gives at decode time:
// appends are queued as BF16 rows and encoded (bit-exactly as they would have been at append
// time) before the first decode that needs them.
#include <memory>
#include <string>
#include <vector>

#include "verify/decode_backend.hpp"

namespace mla::transform {
struct Kv4Params;
}

namespace mla::verify {

// The --kv names, for help and checks.
const std::vector<std::string>& kv_format_names();
// The backend for a --device (cpu, cuda), --kv and --kv4-route (bf16, fp8; kv4_route_names());
// throws InputError for an unknown or unsupported combination (the study configurations are CPU
// only; a route other than bf16 needs --kv fp4, the codebook has no fp8 route).
// fp4 and codebook need kv4 (the per-layer parameters; InputError without them).
std::unique_ptr<DecodeBackend> make_kv_backend(const std::string& device, const std::string& kv,
                                               const transform::Kv4Params* kv4 = nullptr,
                                               const std::string& kv4_route = "bf16");

// Kernel-vs-float64-path relative L2 bound for a --kv format (and --kv4-route): the user's
// --kernel-rel-l2 for bf16, at least kFp8KernelRelL2 for the FP8 formats
// (tests/quant/test_fp8_decode_twin.cpp derives it from the E4M3 grid), at least kKv4KernelRelL2
// for fp4 and codebook on the bf16 route, kKv4Fp8RouteKernelRelL2 for fp4 on the fp8 route
// (verify/kv4_backend.hpp).
constexpr double kFp8KernelRelL2 = 0.08;
double kv_kernel_tolerance(const std::string& kv, double user_bound, const std::string& kv4_route = "bf16");
// Cosine-difference bound likewise (~ rel_l2^2 / 2 at that relative L2).
constexpr double kFp8CosDiff = 3.2e-3;
double kv_cos_tolerance(const std::string& kv, double user_bound, const std::string& kv4_route = "bf16");

// The FP8 backend on the GPU (fp8_backend_cuda.cpp); throws without CUDA or a device.
std::unique_ptr<DecodeBackend> make_cuda_fp8_backend();

}  // namespace mla::verify
