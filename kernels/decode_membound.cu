// The memory-bound path: <= 16 query rows (one 16-row block; H <= 16 decode, H = 8 with MTP).
// The cache streams through a bulk-copy producer ring at near copy bandwidth; the math per
// 32-token tile runs on mma.sync (the tensor cores have ample headroom at 16 rows).
#include "kernels/decode_launch.hpp"
#include "kernels/decode_membound_consumer.cuh"

namespace mla::kernels::detail {
namespace {

using quant::kPartInfoInts;

// Source of the rows of a tile past the request's length (or of a tile with a bad page id):
// zeros, so NaN-poisoned page tails never reach P.V. d_c + d_r <= 640.
__device__ __align__(16) uint16_t g_zero_row[640];

// Two CTAs per SM (one CTA with 5 stages was bound by its 4 consumer warps: docs/gpu-notes.md,
// v3a), each 4 consumer warps + 1 producer warp. The producer walks the part's (request,
// tile) run and streams each 32-token tile into a STAGES-deep shared-memory ring with one
// bulk copy per token row (cp.async.bulk, completing on the stage's "full" mbarrier; rows past
// the request's length copy a zero row); consumers release a stage through its "empty"
// mbarrier. The ring runs across segment boundaries, so the next request's tiles are already
// in flight during an epilogue. The consumers' math: decode_membound_consumer.cuh.
template <int DC>
__global__ void __launch_bounds__(kV3Threads, 2)
    decode_split_v3_kernel(const quant::Bf16DecodeParams p, const int32_t* __restrict__ info,
                           const int32_t* __restrict__ offsets, float* o_acc, float* lse_acc) {
  using C = V3Cfg<DC>;
  constexpr int BN = kV3BN, S = kV3Stages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t bar0 = smem_u32(smem_raw);  // full[s] = bar0 + 8 s, empty[s] = bar0 + 8 (S + s)
  float4* sPart = reinterpret_cast<float4*>(smem_raw + kV3Header);
  const int dim = DC + p.d_r;
  const int srow = dim + 8;  // +16 B per row: conflict-free ldmatrix
  bf16* sK = reinterpret_cast<bf16*>(smem_raw + kV3Header + kV3PartFloats * sizeof(float));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(bar0 + 8 * s, 1);                   // the producer's arrive.expect_tx
      mbar_init(bar0 + 8 * (S + s), kV3Consumers);  // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  griddep_wait();  // the schedule (previous kernel) is complete from here on

  const int32_t* in = info + blockIdx.x * kPartInfoInts;
  const bf16* cache = reinterpret_cast<const bf16*>(p.kv_cache);

  if (warp == kV3Consumers) {  // ---- producer warp ----
    const int b_begin = in[0], t_begin = in[1], end_b = in[2], end_t = in[3];
    const uint32_t tile_bytes = static_cast<uint32_t>(BN * dim * 2);
    int it = 0;
    for (int b = b_begin, t = t_begin; b < end_b || (b == end_b && t < end_t); ++b, t = 0) {
      const int L = p.seqlens[b];
      const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, BN);
      const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;
      int group_page = -1;  // lane l: page id of tile (group start + l), loaded 32 tiles at a time
      for (int ti = t; ti < stop; ++ti, ++it) {
        const int stage = it % S;
        // Page ids: one load per lane for the next 32 tiles (one L2 round trip per 32 tiles, not
        // per tile: a serial per-tile lookup capped v3a's producer), then wait for the stage, so
        // the copy is issued as soon as the consumers release it.
        const int j0 = ti * BN;
        if ((ti - t) % 32 == 0) {
          const int jl = (ti + lane) * BN;
          const int slot = jl / p.page_size;
          group_page = (ti + lane < stop && jl < L && slot < p.max_pages) ? ptab[slot] : -1;
        }
        const bf16* base = nullptr;
        int valid = 0;
        if (j0 < L) {
          const int page = __shfl_sync(0xffffffffu, group_page, (ti - t) % 32);
          if (page >= 0 && page < p.num_pages) {
            base = cache + (static_cast<size_t>(page) * p.page_size + j0 % p.page_size) * dim;
            valid = min(BN, L - j0);
          } else if (lane == 0 && p.error_flag != nullptr) {
            atomicExch(p.error_flag, 1);  // bad device data: tile skipped (zero keys), flagged
          }
        }
        mbar_wait(bar0 + 8 * (S + stage), ((it / S) & 1) ^ 1);
        if (lane == 0) mbar_arrive_expect_tx(bar0 + 8 * stage, tile_bytes);
        __syncwarp();
        const void* src = lane < valid ? static_cast<const void*>(base + static_cast<size_t>(lane) * dim)
                                       : static_cast<const void*>(g_zero_row);
        bulk_g2s(smem_u32(sK + (stage * BN + lane) * srow), src, static_cast<uint32_t>(dim * 2), bar0 + 8 * stage);
      }
    }
    return;
  }

  membound_consume<DC, S>(p, in, offsets, o_acc, lse_acc, bar0, sPart, sK, warp, lane);
}

template <int DC>
void launch_for_dc(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  using C = V3Cfg<DC>;
  auto kernel = decode_split_v3_kernel<DC>;
  static cuda::SmemLimitSet attr_set;  // the largest supported d_r (128) sets the ceiling once
  cuda::set_smem_limit_once(kernel, C::smem_bytes(DC + 128), attr_set,
                            "mla decode split kernel (memory-bound path) smem limit");
  launch(kernel, dim3(p.num_parts), dim3(kV3Threads), C::smem_bytes(DC + p.d_r), stream, use_pdl(p),
         "split kernel (memory-bound path) launch", p, static_cast<const int32_t*>(w.info),
         static_cast<const int32_t*>(w.offsets), w.o_acc, w.lse_acc);
}

}  // namespace

void launch_membound(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream) {
  switch (p.d_c) {
    case 32: launch_for_dc<32>(p, w, stream); break;
    case 64: launch_for_dc<64>(p, w, stream); break;
    case 128: launch_for_dc<128>(p, w, stream); break;
    case 256: launch_for_dc<256>(p, w, stream); break;
    case 512: launch_for_dc<512>(p, w, stream); break;
    default: throw InputError("mla decode params: d_c = " + std::to_string(p.d_c));
  }
}

}  // namespace mla::kernels::detail
