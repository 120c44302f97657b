// Decode from a 4-bit paged latent cache (kernels/kv4_decode.hpp): the split kernel (producer
// warp -> raw 4-bit ring -> converter warp -> BF16 ring -> the memory-bound path's consumer
// warps) and the host entry point.
#include "kernels/kv4_decode.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_membound_consumer.cuh"

namespace mla::kernels {
namespace detail {
namespace {

using quant::kPartInfoInts;

// One CTA per SM: 4 consumer warps (0-3), the producer (4), 7 converter warps (5-11). The
// consumers need 168 registers at d_c = 512, so 12 warps is the most that fits (12 x 168 x 32
// <= 64 K registers). With two CTAs per SM (the BF16 path's choice) only one converter warp
// fits per CTA, and that warp limited the decode to 0.35x FlashMLA's BF16 time (docs/gpu-notes.md).
constexpr int kKv4Converters = 7;
constexpr int kKv4Warps = kV3Consumers + 1 + kKv4Converters;
constexpr int kKv4Threads = 32 * kKv4Warps;
constexpr int kKv4Producer = kV3Consumers, kKv4FirstConverter = kV3Consumers + 1;
constexpr int kKv4Stages = 4;  // BF16 ring and raw ring advance together (tile it in stage it % 4)
// Header: mbarriers full[4], empty[4] (the consumers' ring, as membound_consume expects them at
// bar0), raw_full[4], raw_empty[4]; the raw stages' valid token counts; the codebook levels.
constexpr int kKv4ValidOff = 128, kKv4LevelsOff = 192, kKv4Header = 256;
constexpr size_t kKv4MaxSmem = 227 * 1024;  // Hopper's per-block opt-in maximum

// Row widths (bytes) of the page sections and their column-block width (docs/formats/kv-fp4.md).
struct Kv4Rows {
  int code, scale, rope;
};
__host__ __device__ inline Kv4Rows kv4_rows(Kv4Format f, int d_c, int d_r) {
  return {d_c / 2, f == Kv4Format::Fp4 ? d_c / 32 : 4, 2 * d_r};
}
__host__ __device__ inline int block_width(int row_bytes) { return row_bytes < 128 ? row_bytes : 128; }
// Offset inside a column block of width w of byte i of in-page token t: the FP8 layout's
// 16-byte chunk swizzle for w >= 32, none for narrower blocks.
__device__ __forceinline__ uint32_t block_offset(int t, int i, int w) {
  const uint32_t a = static_cast<uint32_t>(t * w + i);
  return w >= 32 ? a ^ (((a >> 7) & static_cast<uint32_t>(w / 16 - 1)) << 4) : a;
}

// Eight E2M1 codes (one 32-bit word, element 2k in the low nibble of byte k) -> four bf16x2
// words of e2m1 * 2^(b - 127). Each nibble (s, e1 e0 m) is placed as bf16 bits s << 15 |
// e1 e0 m << 6, whose value is exactly e2m1 * 2^-126 (normal for e > 0, subnormal 2^-127 for
// 0.5); two exact multiplies by powers of two give the value. `scale2` is the group's 2^(b-127)
// as a bf16 pair (NaN for b = 255, the poisoned-token marker).
__device__ __forceinline__ void fp4_word_to_bf16(uint32_t x, uint32_t scale2, uint32_t (&out)[4]) {
  const uint32_t lo = x & 0x0F0F0F0Fu, hi = (x >> 4) & 0x0F0F0F0Fu;
  const uint32_t two126_bits = 0x7E807E80u;  // 2^126 in both halves
  const __nv_bfloat162 two126 = *reinterpret_cast<const __nv_bfloat162*>(&two126_bits);
  const __nv_bfloat162 s2 = *reinterpret_cast<const __nv_bfloat162*>(&scale2);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    // byte 0 <- lo byte k (element 2k), byte 2 <- hi byte k (element 2k + 1); bytes 1, 3 masked.
    const uint32_t t = __byte_perm(lo, hi, static_cast<uint32_t>(k | (k << 4) | ((4 + k) << 8) | ((4 + k) << 12)));
    const uint32_t r = ((t << 6) & 0x01C001C0u) | ((t << 12) & 0x80008000u);
    __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&r), two126);
    v = __hmul2(v, s2);
    out[k] = *reinterpret_cast<const uint32_t*>(&v);
  }
}

__device__ __forceinline__ uint32_t ue8m0_bf16_pair(uint32_t b) {
  const uint32_t h = b == 255u ? 0x7FC0u : (b == 0u ? 0x0040u : (b << 7));
  return h | (h << 16);
}

template <int DC, bool CODEBOOK>
struct Kv4Cfg {
  static constexpr Kv4Format kFormat = CODEBOOK ? Kv4Format::Codebook : Kv4Format::Fp4;
  static constexpr int kCodeRow = DC / 2, kScaleRow = CODEBOOK ? 4 : DC / 32;
  static constexpr int kCodeW = kCodeRow < 128 ? kCodeRow : 128;
  static constexpr int kGroups = DC / 32;  // 16 code bytes -> 32 values each
  __host__ __device__ static size_t raw_tile_bytes(int d_r) { return static_cast<size_t>(kV3BN) * (kCodeRow + kScaleRow + 2 * d_r); }
  __host__ __device__ static size_t bf16_ring_bytes(int d_r) { return static_cast<size_t>(kKv4Stages) * kV3BN * (DC + d_r + 8) * 2; }
  __host__ __device__ static size_t smem_bytes(int d_r) {
    const size_t raw0 = (kKv4Header + kV3PartFloats * sizeof(float) + bf16_ring_bytes(d_r) + 127) / 128 * 128;
    return raw0 + kKv4Stages * raw_tile_bytes(d_r);
  }
};

template <int DC, bool CODEBOOK>
__global__ void __launch_bounds__(kKv4Threads, 1)
    kv4_split_kernel(const quant::Bf16DecodeParams p, const Kv4DecodeParams kp, const int32_t* __restrict__ info,
                     const int32_t* __restrict__ offsets, float* o_acc, float* lse_acc) {
  using C = Kv4Cfg<DC, CODEBOOK>;
  constexpr int BN = kV3BN, S = kKv4Stages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // full[s] = bar0 + 8 s, empty[s] = bar0 + 8 (S + s), raw_full[s] = bar0 + 8 (2S + s),
  // raw_empty[s] = bar0 + 8 (3S + s).
  const uint32_t bar0 = smem_u32(smem_raw);
  int* sValid = reinterpret_cast<int*>(smem_raw + kKv4ValidOff);
  float* sLevels = reinterpret_cast<float*>(smem_raw + kKv4LevelsOff);
  float4* sPart = reinterpret_cast<float4*>(smem_raw + kKv4Header);
  bf16* sK = reinterpret_cast<bf16*>(smem_raw + kKv4Header + kV3PartFloats * sizeof(float));
  const size_t raw0 = (kKv4Header + kV3PartFloats * sizeof(float) + C::bf16_ring_bytes(p.d_r) + 127) / 128 * 128;
  unsigned char* sRaw = smem_raw + raw0;
  const int dim = DC + p.d_r, srow = dim + 8;
  const Kv4Rows rows = kv4_rows(C::kFormat, DC, p.d_r);
  const int rope_w = block_width(rows.rope);
  // Raw tile: [code blocks: DC/2 / kCodeW x (BN x kCodeW)][scales: BN x scale row][rope blocks].
  const int raw_scale_off = BN * rows.code, raw_rope_off = raw_scale_off + BN * rows.scale;
  const uint32_t raw_bytes = static_cast<uint32_t>(C::raw_tile_bytes(p.d_r));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(bar0 + 8 * s, kKv4Converters);      // one arrive per converter warp
      mbar_init(bar0 + 8 * (S + s), kV3Consumers);  // one arrive per consumer warp
      mbar_init(bar0 + 8 * (2 * S + s), 1);         // the producer's arrive.expect_tx
      mbar_init(bar0 + 8 * (3 * S + s), kKv4Converters);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (CODEBOOK && threadIdx.x < 16) sLevels[threadIdx.x] = kp.levels[threadIdx.x];
  __syncthreads();
  griddep_wait();

  const int32_t* in = info + blockIdx.y * kPartInfoInts;  // grid: split_grid
  const unsigned char* cache = reinterpret_cast<const unsigned char*>(p.kv_cache);
  const size_t page_bytes = static_cast<size_t>(p.page_size) * (rows.code + rows.scale + rows.rope);

  if (warp == kKv4Producer) {  // ---- producer: the tile's runs of each section, as stored ----
    const int b_begin = in[0], t_begin = in[1], end_b = in[2], end_t = in[3];
    int it = 0;
    for (int b = b_begin, t = t_begin; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
      const int L = p.seqlens[b];
      const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
      const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;
      int group_page = -1;  // lane l: page id of tile (group start + l), 32 tiles at a time
      for (int ti = t; ti < stop; ++ti, ++it) {
        const int stage = it % S;
        const int j0 = ti * BN;
        if ((ti - t) % 32 == 0) {
          const int jl = (ti + lane) * BN;
          const int slot = jl / p.page_size;
          group_page = (ti + lane < stop && jl < L && slot < p.max_pages) ? ptab[slot] : -1;
        }
        const unsigned char* page = nullptr;
        int valid = 0;
        if (j0 < L) {
          const int pg = __shfl_sync(0xffffffffu, group_page, (ti - t) % 32);
          if (pg >= 0 && pg < p.num_pages) {
            page = cache + static_cast<size_t>(pg) * page_bytes;
            valid = min(BN, L - j0);
          } else if (lane == 0 && p.error_flag != nullptr) {
            atomicExch(p.error_flag, 1);  // bad device data: tile skipped (zero keys), flagged
          }
        }
        mbar_wait(bar0 + 8 * (3 * S + stage), ((it / S) & 1) ^ 1);
        const uint32_t full = bar0 + 8 * (2 * S + stage);
        if (lane == 0) {
          sValid[stage] = valid;
          mbar_arrive_expect_tx(full, valid > 0 ? raw_bytes : 0u);
        }
        __syncwarp();
        if (valid > 0) {
          const int t0 = j0 % p.page_size;
          const uint32_t dst = smem_u32(sRaw + stage * raw_bytes);
          const int n_code = rows.code / C::kCodeW, n_rope = rows.rope / rope_w;
          if (lane < n_code) {  // code block kb: BN rows of kCodeW bytes from in-page token t0
            const size_t src = static_cast<size_t>(lane) * p.page_size * C::kCodeW + static_cast<size_t>(t0) * C::kCodeW;
            bulk_g2s(dst + lane * BN * C::kCodeW, page + src, BN * C::kCodeW, full);
          } else if (lane == n_code) {
            const size_t src = static_cast<size_t>(p.page_size) * rows.code + static_cast<size_t>(t0) * rows.scale;
            bulk_g2s(dst + raw_scale_off, page + src, BN * rows.scale, full);
          } else if (lane < n_code + 1 + n_rope) {
            const int rb = lane - n_code - 1;
            const size_t src = static_cast<size_t>(p.page_size) * (rows.code + rows.scale) +
                               static_cast<size_t>(rb) * p.page_size * rope_w + static_cast<size_t>(t0) * rope_w;
            bulk_g2s(dst + raw_rope_off + rb * BN * rope_w, page + src, BN * rope_w, full);
          }
        }
      }
    }
    return;
  }

  if (warp >= kKv4FirstConverter) {  // ---- converters: lane = token, warp cw = groups cw, cw + 7, ...
    const int cw = warp - kKv4FirstConverter;
    const int b_begin = in[0], t_begin = in[1], end_b = in[2], end_t = in[3];
    int it = 0;
    for (int b = b_begin, t = t_begin; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
      const int L = p.seqlens[b];
      const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
      for (int ti = t; ti < stop; ++ti, ++it) {
        const int stage = it % S;
        const uint32_t parity = (it / S) & 1;
        mbar_wait(bar0 + 8 * (2 * S + stage), parity);       // raw tile landed
        mbar_wait(bar0 + 8 * (S + stage), parity ^ 1);        // consumers released the BF16 stage
        const unsigned char* raw = sRaw + stage * raw_bytes;
        const int t0 = (ti * BN) % p.page_size;
        uint4* row = reinterpret_cast<uint4*>(sK + (stage * BN + lane) * srow);
        if (lane < sValid[stage]) {
          float tok_scale = 0.f;
          if constexpr (CODEBOOK) tok_scale = *reinterpret_cast<const float*>(raw + raw_scale_off + 4 * lane);
#pragma unroll 2
          for (int g = cw; g < C::kGroups; g += kKv4Converters) {
            const int byte = 16 * g;
            const int kb = byte / C::kCodeW;
            const uint4 codes = *reinterpret_cast<const uint4*>(
                raw + kb * BN * C::kCodeW + (block_offset(t0 + lane, byte % C::kCodeW, C::kCodeW) - t0 * C::kCodeW));
            const uint32_t cw[4] = {codes.x, codes.y, codes.z, codes.w};
            uint32_t o[16];
            if constexpr (CODEBOOK) {
#pragma unroll
              for (int w = 0; w < 4; ++w)
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                  const uint32_t byte_k = (cw[w] >> (8 * k)) & 0xFFu;
                  o[4 * w + k] = pack_bf16(sLevels[byte_k & 15u] * tok_scale, sLevels[byte_k >> 4] * tok_scale);
                }
            } else {
              const uint32_t s2 = ue8m0_bf16_pair(raw[raw_scale_off + lane * rows.scale + g]);
#pragma unroll
              for (int w = 0; w < 4; ++w) {
                uint32_t q[4];
                fp4_word_to_bf16(cw[w], s2, q);
                o[4 * w + 0] = q[0];
                o[4 * w + 1] = q[1];
                o[4 * w + 2] = q[2];
                o[4 * w + 3] = q[3];
              }
            }
#pragma unroll
            for (int v = 0; v < 4; ++v) row[4 * g + v] = make_uint4(o[4 * v], o[4 * v + 1], o[4 * v + 2], o[4 * v + 3]);
          }
          for (int c = cw; c < rows.rope / 16; c += kKv4Converters) {  // RoPE: 16-byte chunks, un-swizzled
            const int rb = (16 * c) / rope_w;
            const uint4 v = *reinterpret_cast<const uint4*>(
                raw + raw_rope_off + rb * BN * rope_w + (block_offset(t0 + lane, (16 * c) % rope_w, rope_w) - t0 * rope_w));
            row[DC / 8 + c] = v;
          }
        } else {  // past the request's length (or a bad page): zeros, as the BF16 path copies
          for (int g = cw; g < C::kGroups; g += kKv4Converters)
            for (int v = 0; v < 4; ++v) row[4 * g + v] = make_uint4(0u, 0u, 0u, 0u);
          for (int c = cw; c < rows.rope / 16; c += kKv4Converters) row[DC / 8 + c] = make_uint4(0u, 0u, 0u, 0u);
        }
        __syncwarp();
        if (lane == 0) {
          mbar_arrive(bar0 + 8 * stage);            // BF16 tile ready for the consumers
          mbar_arrive(bar0 + 8 * (3 * S + stage));  // raw stage free for the producer
        }
      }
    }
    return;
  }

  membound_consume<DC, S>(p, in, offsets, o_acc, lse_acc, bar0, sPart, sK, warp, lane, 16 * blockIdx.x);
}

// Blocks of 16 query rows (grid.x; the parts along y: split_grid): each CTA runs the whole ring for its block, so more rows
// read and dequantise the cache once per block (functional for any head count, fast only for
// <= 16 rows). One CTA per SM in all: the parts share the SMs among the row blocks.
inline int kv4_row_blocks(const quant::Bf16DecodeParams& p) { return (p.s_q * p.heads + 15) / 16; }
inline int kv4_default_parts(const quant::Bf16DecodeParams& p) {
  return quant::decode_balanced_parts(std::max(1, cuda::sm_count() / kv4_row_blocks(p)), p.batch);
}

template <int DC, bool CODEBOOK>
void launch_kv4(const Kv4DecodeParams& kp, const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  using C = Kv4Cfg<DC, CODEBOOK>;
  auto kernel = kv4_split_kernel<DC, CODEBOOK>;
  static cuda::SmemLimitSet attr_set;  // validate_kv4 refused shapes needing more
  cuda::set_smem_limit_once(kernel, kKv4MaxSmem, attr_set, "4-bit decode split kernel smem limit");
  launch(kernel, split_grid(p.num_parts, kv4_row_blocks(p)), dim3(kKv4Threads), C::smem_bytes(p.d_r), stream, false,
         "split kernel (4-bit cache) launch", p, kp, static_cast<const int32_t*>(w.info),
         static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc);
}

template <bool CODEBOOK>
void launch_kv4_for_dc(const Kv4DecodeParams& kp, const quant::Bf16DecodeParams& p, const Workspace& w,
                       cudaStream_t stream) {
  switch (p.d_c) {
    case 32: launch_kv4<32, CODEBOOK>(kp, p, w, stream); break;
    case 64: launch_kv4<64, CODEBOOK>(kp, p, w, stream); break;
    case 128: launch_kv4<128, CODEBOOK>(kp, p, w, stream); break;
    case 256: launch_kv4<256, CODEBOOK>(kp, p, w, stream); break;
    case 512: launch_kv4<512, CODEBOOK>(kp, p, w, stream); break;
    default: throw InputError("4-bit decode params: d_c = " + std::to_string(p.d_c) + " (supported: 32, 64, 128, 256, 512)");
  }
}

}  // namespace
}  // namespace detail

size_t kv4_bytes_per_token(Kv4Format f, int d_c, int d_r) {
  const detail::Kv4Rows r = detail::kv4_rows(f, d_c, d_r);
  return static_cast<size_t>(r.code + r.scale + r.rope);
}

namespace {
// The shape checks of this path on top of the BF16 decode's (validate_decode_params).
void validate_kv4(const Kv4DecodeParams& kp) {
  const quant::Bf16DecodeParams& p = kp.base;
  quant::validate_decode_params(p);
  auto bad = [](const std::string& what) { throw InputError("4-bit decode params: " + what); };
  if (p.variant != 0) bad("variant = " + std::to_string(p.variant) + " (the 4-bit path has one: 0)");
  if (p.planned) bad("planned = true (the 4-bit path schedules each call itself; it has no plan entry)");
  const int rope = 2 * p.d_r;
  if (!(rope == 16 || rope == 32 || rope == 64 || rope % 128 == 0))
    bad("d_r = " + std::to_string(p.d_r) + " (2 d_r bytes of RoPE must be 16, 32, 64 or a multiple of 128)");
  const size_t smem = kp.format == Kv4Format::Codebook ? detail::Kv4Cfg<512, true>::smem_bytes(p.d_r)
                                                       : detail::Kv4Cfg<512, false>::smem_bytes(p.d_r);
  if (smem > detail::kKv4MaxSmem)
    bad("d_r = " + std::to_string(p.d_r) + " needs " + std::to_string(smem) + " bytes of shared memory at d_c = 512 (at most " +
        std::to_string(detail::kKv4MaxSmem) + ")");
  if (kp.format == Kv4Format::Codebook)
    for (int i = 0; i < 16; ++i)
      if (!std::isfinite(kp.levels[i])) bad("codebook level " + std::to_string(i) + " is not finite");
}
}  // namespace

int kv4_decode_parts_for_device(const Kv4DecodeParams& kp) { return detail::kv4_default_parts(kp.base); }

size_t kv4_decode_workspace_bytes_for(const Kv4DecodeParams& kp) {
  const quant::Bf16DecodeParams& p = kp.base;
  const int parts = p.num_parts > 0 ? p.num_parts : detail::kv4_default_parts(p);
  return quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts);
}

void mla_decode_kv4(const Kv4DecodeParams& kp, cudaStream_t stream) {
  validate_kv4(kp);
  quant::Bf16DecodeParams p = kp.base;
  if (p.num_parts == 0) p.num_parts = detail::kv4_default_parts(p);
  const size_t need = quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, p.num_parts);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("4-bit decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " for this shape; see kv4_decode_workspace_bytes_for)");
  const detail::Workspace w = detail::carve(p);
  detail::launch_schedule(p, w, detail::kV3BN, stream);  // 32-token tiles, every row count
  if (kp.format == Kv4Format::Codebook)
    detail::launch_kv4_for_dc<true>(kp, p, w, stream);
  else
    detail::launch_kv4_for_dc<false>(kp, p, w, stream);
  detail::launch_combine(p, w, stream);
}

}  // namespace mla::kernels
