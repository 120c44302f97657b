// Compiled (never run) by tests/kernels/wgmma_guard/check.sh through cmake/wgmma_guard.sh: v6's S
// tile in a loop, issued and waited for inside one iteration, or (MLA_GUARD_PROBE_SERIALISED) issued
// before the back edge and waited for after it, which ptxas answers by serialising the wgmmas
// (docs/gpu-notes.md, session 17). The guard must pass the first compile and fail the second.
#include <cstdint>

#include "kernels/decode_device.cuh"
#include "kernels/wgmma_ops.cuh"

namespace gmma = mla::kernels::gmma;
using namespace mla::kernels::detail;

// S of one 64-token tile (36 k-steps of m64n64k16), each 64-column block waited for as it lands
// when kPerBlock.
template <bool kPerBlock>
__device__ __forceinline__ void tile_s(float (&sv)[32], uint64_t dq, uint64_t dk, uint32_t bar, int parity) {
  gmma::fence();
  gmma::wgmma_ss_n64_first(sv, dq, dk);
#pragma unroll
  for (int kk = 1; kk < 36; ++kk) {
    if (kPerBlock && kk % 4 == 0) mbar_wait(bar + 8 * (kk / 4), parity);
    const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
    gmma::wgmma_ss_n64(sv, gmma_desc_at(dq, off), gmma_desc_at(dk, off));
  }
  gmma::commit();
  gmma::wait<0>();
#pragma unroll
  for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
}

// S of one 64-token tile (36 k-steps of m64n64k16), issued and committed; the caller waits.
__device__ __forceinline__ void issue_s(float (&sv)[32], uint64_t dq, uint64_t dk) {
  gmma::fence();
  gmma::wgmma_ss_n64_first(sv, dq, dk);
#pragma unroll
  for (int kk = 1; kk < 36; ++kk) {
    const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
    gmma::wgmma_ss_n64(sv, gmma_desc_at(dq, off), gmma_desc_at(dk, off));
  }
  gmma::commit();
}

__global__ void __launch_bounds__(128, 1) guard_probe(float* out, int tiles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t sq = smem_u32(smem), tile = sq + 73728;
  const uint64_t dq = gmma_desc(sq, 16, 1024), dk = gmma_desc(tile, 16, 1024);
  float sv[32], acc = 0.f;
#ifdef MLA_GUARD_PROBE_SERIALISED
  // The next tile's S issued before the loop's back edge and waited for at the top of the next
  // iteration (session 17's first overlapped FP8 kernel): ptxas serialises every wgmma (C7514/C7515).
  issue_s(sv, dq, dk);
  for (int t = 0; t < tiles; ++t) {
    gmma::wait<0>();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      gmma::fence_operand(sv[i]);
      acc += sv[i];
    }
    if (t + 1 < tiles) issue_s(sv, dq, dk);
  }
#else
  for (int t = 0; t < tiles; ++t) {  // issued and waited for inside one iteration
    issue_s(sv, dq, dk);
    gmma::wait<0>();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      gmma::fence_operand(sv[i]);
      acc += sv[i];
    }
  }
#endif
  out[threadIdx.x] = acc;
}
