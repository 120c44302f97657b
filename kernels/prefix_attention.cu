// Naive attention of all B * s_q query rows to the decompressed shared prefix (one head per CTA
// column): a FlashAttention-2 style forward pass on mma.sync, non-causal, over K [L_s, H, d_n + d_r]
// and V [L_s, H, d_v], for the tiny models' head shape (96, 64); the (192, 128) shape runs the
// wgmma kernel (prefix_attention_wgmma.cu). Numerics: quant/prefix_twin_bf16.hpp.
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/decode_device.cuh"
#include "kernels/prefix_attention.hpp"
#include "kernels/prefix_device.cuh"

namespace mla::kernels {
namespace prefix {
// The wgmma kernel for (d_n + d_r, d_v) = (192, 128): kernels/prefix_attention_wgmma.cu.
void launch_prefix_attn_wgmma(const PrefixAttnParams& p, int per_split, cudaStream_t stream);
}  // namespace prefix
namespace {

using namespace prefix;

constexpr int kTile = quant::kPrefixTile;            // 64 prefix tokens per tile
constexpr int kRows = quant::kPrefixRowsPerBlock;    // 128 query rows per CTA (8 warps x 16)
constexpr int kThreads = 256;
using detail::kLn2;
using detail::kLog2e;

// Shared-memory row stride of a K or V tile row of `bytes`: the XOR swizzle (prefix_device.cuh)
// moves a 16-byte chunk within its aligned group of 8 (128 bytes), so a row must span whole
// groups: the tiny shape's 192-byte K rows are padded to 256 (without it, chunks 8..11 landed
// in the next row: wrong scores on the first GPU run).
constexpr int smem_row_bytes(int bytes) { return (bytes + 127) / 128 * 128; }

template <int DQK, int DV>
constexpr size_t attn_smem_bytes() {  // K and V tiles, double-buffered
  return 2 * static_cast<size_t>(kTile) * (smem_row_bytes(DQK * 2) + smem_row_bytes(DV * 2));
}

// grid (row blocks, splits, heads). Each warp owns 16 query rows; its Q fragments stay in
// registers; S = Q K^T and O += P V run on mma.sync; the softmax state (m, l) of row lane/4 and
// lane/4 + 8 lives in each of the quad's four threads (l as four partial sums until the end).
template <int DQK, int DV>
__global__ void __launch_bounds__(kThreads, 1) prefix_attn_kernel(PrefixAttnParams p, int per_split) {
  extern __shared__ __align__(128) char smem[];
  // KCH / VCH: 16-byte chunks per K / V row in global memory; KB / VB: smem row strides.
  constexpr int KCH = DQK * 2 / 16, VCH = DV * 2 / 16;
  constexpr int KB = smem_row_bytes(DQK * 2), VB = smem_row_bytes(DV * 2);
  char* k_s[2] = {smem, smem + kTile * KB};
  char* v_s[2] = {smem + 2 * kTile * KB, smem + 2 * kTile * KB + kTile * VB};

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3;
  const int split = blockIdx.y, h = blockIdx.z, H = p.heads;
  const int row_lo = blockIdx.x * kRows + warp * 16 + g, row_hi = row_lo + 8;
  const int j_begin = split * per_split;
  const int j_end = min(p.prefix_len, j_begin + per_split);
  const int n_tiles = j_end > j_begin ? (j_end - j_begin + kTile - 1) / kTile : 0;

  // Q fragments (m16n8k16 A layout): a0 (row g, cols 2q..), a1 (row g+8), a2/a3 (cols + 8).
  uint32_t qf[DQK / 16][4];
  {
    const uint32_t* q_lo = reinterpret_cast<const uint32_t*>(p.q + (static_cast<size_t>(row_lo) * H + h) * DQK);
    const uint32_t* q_hi = reinterpret_cast<const uint32_t*>(p.q + (static_cast<size_t>(row_hi) * H + h) * DQK);
    const bool lo_ok = row_lo < p.rows, hi_ok = row_hi < p.rows;
#pragma unroll
    for (int ks = 0; ks < DQK / 16; ++ks) {
      const int c = ks * 8 + q4;  // in bf16 pairs
      qf[ks][0] = lo_ok ? q_lo[c] : 0u;
      qf[ks][1] = hi_ok ? q_hi[c] : 0u;
      qf[ks][2] = lo_ok ? q_lo[c + 4] : 0u;
      qf[ks][3] = hi_ok ? q_hi[c + 4] : 0u;
    }
  }

  auto load_tile = [&](int t, int buf) {
    const int j0 = j_begin + t * kTile;
    for (int idx = tid; idx < kTile * KCH; idx += kThreads) {
      const int r = idx / KCH, c = idx % KCH, j = j0 + r;
      const bool ok = j < j_end;
      const uint16_t* src = p.k + (static_cast<size_t>(ok ? j : j_begin) * H + h) * DQK + c * 8;
      cp_async16(smem_addr(k_s[buf]) + swz(r, c, KB), src, ok);
    }
    for (int idx = tid; idx < kTile * VCH; idx += kThreads) {
      const int r = idx / VCH, c = idx % VCH, j = j0 + r;
      const bool ok = j < j_end;
      const uint16_t* src = p.v + (static_cast<size_t>(ok ? j : j_begin) * H + h) * DV + c * 8;
      cp_async16(smem_addr(v_s[buf]) + swz(r, c, VB), src, ok);
    }
  };

  float o[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  const float scale_log2 = p.scale * kLog2e;

  if (n_tiles > 0) {
    load_tile(0, 0);
    cp_async_commit();
  }
  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {
      load_tile(t + 1, (t + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t ks_base = smem_addr(k_s[t & 1]), vs_base = smem_addr(v_s[t & 1]);

    // S = Q K^T: 16 rows x 64 tokens per warp (8 n-tiles of 8 tokens).
    float s[kTile / 8][4];
#pragma unroll
    for (int i = 0; i < kTile / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < DQK / 16; ++ks) {
#pragma unroll
      for (int np = 0; np < kTile / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, ks_base + swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1), KB));
        mma16816(s[2 * np], qf[ks], b[0], b[1]);
        mma16816(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }

    // Online softmax in base 2; tokens past the run's end are masked.
    const int j0 = j_begin + t * kTile;
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * q4 + (e & 1);
        const float x = j < j_end ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][e] = x;
        if (e < 2) mx_lo = fmaxf(mx_lo, x);
        else mx_hi = fmaxf(mx_hi, x);
      }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);  // finite: the tile has a key
    const float alpha_lo = exp2f(m_lo - mn_lo), alpha_hi = exp2f(m_hi - mn_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - mn_lo);
      s[nt][1] = exp2f(s[nt][1] - mn_lo);
      s[nt][2] = exp2f(s[nt][2] - mn_hi);
      s[nt][3] = exp2f(s[nt][3] - mn_hi);
      sum_lo += s[nt][0] + s[nt][1];
      sum_hi += s[nt][2] + s[nt][3];
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) {
      o[i][0] *= alpha_lo;
      o[i][1] *= alpha_lo;
      o[i][2] *= alpha_hi;
      o[i][3] *= alpha_hi;
    }

    // O += P V: P (bf16) from the S accumulators, V through ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_trans(b, vs_base + swz(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4), VB));
        mma16816(o[2 * dp], a, b[0], b[1]);
        mma16816(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the buffer is refilled by the next iteration's load
  }

  // Epilogue: complete the row sums over the quad, normalise, write the run's partials.
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
  const size_t base = static_cast<size_t>(split) * p.rows;
  if (row_lo < p.rows) {
    const size_t idx = (base + row_lo) * H + h;
    float2* dst = reinterpret_cast<float2*>(p.part_o + idx * DV);
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) dst[i * 4 + q4] = make_float2(o[i][0] * inv_lo, o[i][1] * inv_lo);
    if (q4 == 0) p.part_lse[idx] = l_lo > 0.f ? (m_lo + log2f(l_lo)) * kLn2 : -INFINITY;
  }
  if (row_hi < p.rows) {
    const size_t idx = (base + row_hi) * H + h;
    float2* dst = reinterpret_cast<float2*>(p.part_o + idx * DV);
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) dst[i * 4 + q4] = make_float2(o[i][2] * inv_hi, o[i][3] * inv_hi);
    if (q4 == 0) p.part_lse[idx] = l_hi > 0.f ? (m_hi + log2f(l_hi)) * kLn2 : -INFINITY;
  }
}

// Tokens per split: whole tiles, as the twin cuts the prefix.
int split_tokens(const PrefixAttnParams& p) {
  const int tiles = (p.prefix_len + kTile - 1) / kTile;
  return (tiles + p.splits - 1) / p.splits * kTile;
}

template <int DQK, int DV>
void launch_attn(const PrefixAttnParams& p, cudaStream_t stream) {
  static cuda::SmemLimitSet smem_set;
  constexpr size_t smem = attn_smem_bytes<DQK, DV>();
  cuda::set_smem_limit_once(prefix_attn_kernel<DQK, DV>, smem, smem_set, "prefix attention: smem limit");
  const int per_split = split_tokens(p);
  const dim3 grid((p.rows + kRows - 1) / kRows, p.splits, p.heads);
  prefix_attn_kernel<DQK, DV><<<grid, kThreads, smem, stream>>>(p, per_split);
  cuda::check(cudaGetLastError(), "prefix attention: launch");
}

}  // namespace

void prefix_attn_bf16(const PrefixAttnParams& p, cudaStream_t stream) {
  quant::validate_prefix_attn(p);
  // (192, 128): wgmma; the mma.sync kernel on that shape reached 27-30% of cuBLAS against the
  // wgmma kernel's 62-68% and was removed (docs/gpu-notes.md, issue 13).
  if (p.d_n == 128) prefix::launch_prefix_attn_wgmma(p, split_tokens(p), stream);
  else launch_attn<96, 64>(p, stream);
}

}  // namespace mla::kernels
