// The two per-head GEMMs around shared-prefix attention, both [64 rows, d_c] x [d_c, N] tiles on
// mma.sync (kernels/prefix_device.cuh):
//   decompress: latent prefix rows x [W_UK[h]; W_UV[h]]^T -> K (+ k_pe copied) and V, bf16;
//   merge:      absorbed output o_lat x W_UV[h]^T, merged with the prefix splits by LSE, bf16.
// Numerics: quant/prefix_twin_bf16.hpp.
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/prefix_attention.hpp"
#include "kernels/prefix_device.cuh"

namespace mla::kernels {
namespace {

using namespace prefix;

constexpr int kThreads = 128;  // 4 warps x 16 rows

template <int NT>
constexpr size_t gemm_smem_bytes() {
  return static_cast<size_t>(64 + NT) * 128;
}


// grid (ceil(L_s / 64), heads). NT = d_n + d_v output columns per head.
template <int DN, int DV, int DR>
__global__ void __launch_bounds__(kThreads) prefix_decompress_kernel(PrefixDecompressParams p) {
  extern __shared__ __align__(128) char smem[];
  constexpr int NT = DN + DV, DQK = DN + DR;
  const int j_base = blockIdx.x * 64, h = blockIdx.y, H = p.heads, dim = p.d_c + DR;
  // A page id out of range is bad device data: that token's K and V rows come out zero.
  auto token_row = [&](int j) -> const uint16_t* {
    const int page = p.page_table[j / p.page_size];
    if (page < 0 || page >= p.num_pages) return nullptr;
    return p.kv_cache + (static_cast<size_t>(page) * p.page_size + j % p.page_size) * dim;
  };
  auto a_row = [&](int r) -> const uint16_t* {
    const int j = j_base + r;
    return j < p.prefix_len ? token_row(j) : nullptr;
  };
  auto w_row = [&](int n) -> const uint16_t* { return p.kv_b + (static_cast<size_t>(h) * NT + n) * p.d_c; };
  float acc[NT / 8][4];
  gemm_rows64<NT>(acc, smem, p.d_c, a_row, w_row, p.kv_b);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = j_base + warp * 16 + g + half * 8;
    if (j >= p.prefix_len) continue;
    uint32_t* k = reinterpret_cast<uint32_t*>(p.k + (static_cast<size_t>(j) * H + h) * DQK);
    uint32_t* v = reinterpret_cast<uint32_t*>(p.v + (static_cast<size_t>(j) * H + h) * DV);
#pragma unroll
    for (int i = 0; i < NT / 8; ++i) {
      const int col = i * 8 + 2 * q4;
      const uint32_t bits = pack_bf16(acc[i][2 * half], acc[i][2 * half + 1]);
      if (col < DN) k[col / 2] = bits;
      else v[(col - DN) / 2] = bits;
    }
  }
  // k_pe: copied bit for bit after the nope part (16-byte chunks).
  for (int idx = threadIdx.x; idx < 64 * (DR / 8); idx += kThreads) {
    const int r = idx / (DR / 8), c = idx % (DR / 8), j = j_base + r;
    if (j >= p.prefix_len) continue;
    const uint16_t* row = token_row(j);
    uint4* dst = reinterpret_cast<uint4*>(p.k + (static_cast<size_t>(j) * H + h) * DQK + DN) + c;
    *dst = row ? reinterpret_cast<const uint4*>(row + p.d_c)[c] : make_uint4(0, 0, 0, 0);
  }
}

// grid (ceil(rows / 64), heads). Row r of the tile is query row blockIdx.x * 64 + r.
template <int DN, int DV>
__global__ void __launch_bounds__(kThreads) prefix_merge_kernel(PrefixMergeParams p) {
  extern __shared__ __align__(128) char smem[];
  const int row_base = blockIdx.x * 64, h = blockIdx.y, H = p.heads;
  auto a_row = [&](int r) -> const uint16_t* {
    const int row = row_base + r;
    return row < p.rows ? p.o_lat + (static_cast<size_t>(row) * H + h) * p.d_c : nullptr;
  };
  auto w_row = [&](int n) -> const uint16_t* {
    return p.kv_b + (static_cast<size_t>(h) * (DN + DV) + DN + n) * p.d_c;
  };
  float acc[DV / 8][4];
  gemm_rows64<DV>(acc, smem, p.d_c, a_row, w_row, p.kv_b);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q4 = lane & 3;
  const size_t plane = static_cast<size_t>(p.rows) * H;  // one split's rows x heads
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row_base + warp * 16 + g + half * 8;
    if (row >= p.rows) continue;
    const size_t rh = static_cast<size_t>(row) * H + h;
    uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + rh * DV);
    const float lse_a = p.lse_lat[rh];
    float m = lse_a;
    for (int s = 0; s < p.splits; ++s) m = fmaxf(m, p.part_lse[s * plane + rh]);
    if (m == -INFINITY) {
#pragma unroll
      for (int i = 0; i < DV / 8; ++i) dst[i * 4 + q4] = 0u;
      if (q4 == 0) p.lse[rh] = -INFINITY;
      continue;
    }
    float sum = expf(lse_a - m);
    for (int s = 0; s < p.splits; ++s) sum += expf(p.part_lse[s * plane + rh] - m);
    const float lse = m + logf(sum);
    const float w_a = expf(lse_a - lse);
    float o[DV / 8][2];
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) {
      o[i][0] = w_a * acc[i][2 * half];
      o[i][1] = w_a * acc[i][2 * half + 1];
    }
    for (int s = 0; s < p.splits; ++s) {
      const float w = expf(p.part_lse[s * plane + rh] - lse);
      const float2* src = reinterpret_cast<const float2*>(p.part_o + (s * plane + rh) * DV);
#pragma unroll
      for (int i = 0; i < DV / 8; ++i) {
        const float2 v = src[i * 4 + q4];
        o[i][0] += w * v.x;
        o[i][1] += w * v.y;
      }
    }
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) dst[i * 4 + q4] = pack_bf16(o[i][0], o[i][1]);
    if (q4 == 0) p.lse[rh] = lse;
  }
}

template <int DN, int DV, int DR>
void launch_decompress(const PrefixDecompressParams& p, cudaStream_t stream) {
  static cuda::SmemLimitSet done;
  constexpr size_t smem = gemm_smem_bytes<DN + DV>();
  cuda::set_smem_limit_once(prefix_decompress_kernel<DN, DV, DR>, smem, done, "prefix decompress: smem limit");
  const dim3 grid((p.prefix_len + 63) / 64, p.heads);
  prefix_decompress_kernel<DN, DV, DR><<<grid, kThreads, smem, stream>>>(p);
  cuda::check(cudaGetLastError(), "prefix decompress: launch");
}

template <int DN, int DV>
void launch_merge(const PrefixMergeParams& p, cudaStream_t stream) {
  static cuda::SmemLimitSet done;
  constexpr size_t smem = gemm_smem_bytes<DV>();
  cuda::set_smem_limit_once(prefix_merge_kernel<DN, DV>, smem, done, "prefix merge: smem limit");
  const dim3 grid((p.rows + 63) / 64, p.heads);
  prefix_merge_kernel<DN, DV><<<grid, kThreads, smem, stream>>>(p);
  cuda::check(cudaGetLastError(), "prefix merge: launch");
}

}  // namespace

void prefix_decompress_bf16(const PrefixDecompressParams& p, cudaStream_t stream) {
  quant::validate_prefix_decompress(p);
  if (p.d_n == 128) launch_decompress<128, 128, 64>(p, stream);
  else launch_decompress<64, 64, 32>(p, stream);
}

void prefix_merge_bf16(const PrefixMergeParams& p, cudaStream_t stream) {
  quant::validate_prefix_merge(p);
  if (p.d_n == 128) launch_merge<128, 128>(p, stream);
  else launch_merge<64, 64>(p, stream);
}

}  // namespace mla::kernels
