// PLACEHOLDER until the 4-bit GPU kernels land (issue 12): the lead replaces this file with the
// CUDA backend (append kernel + dequantising decode). It exists only because make_kv_backend
// references the factory; it throws for every build.
#include "core/error.hpp"
#include "verify/kv4_backend.hpp"

namespace mla::verify {

std::unique_ptr<DecodeBackend> make_cuda_kv4_backend(const transform::Kv4Params& params) {
  throw Error("--kv " + params.format + " --device cuda: the 4-bit CUDA backend is not built yet (use --device cpu)");
}

}  // namespace mla::verify
