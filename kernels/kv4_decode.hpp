#pragma once
// Decode from a 4-bit paged latent cache on Hopper (sm_90a): FP4 (E2M1 codes + one UE8M0 byte
// per 32 values, BF16 RoPE) or codebook (4-bit indices into the layer's 16-level table + one
// fp32 scale per token, BF16 RoPE); page layouts in docs/formats/kv-fp4.md.
//
// Each 32-token tile is brought into shared memory as it is stored (bulk copies of the tile's
// code, scale and RoPE runs), dequantised there to BF16 by 7 converter warps (FP4: e2m1 * 2^(b -
// 127), exact in BF16; codebook: BF16_RNE(level[idx] * scale) in fp32), and handed to the
// memory-bound BF16 path's consumer warps (decode_membound_consumer.cuh) unchanged, one CTA per
// SM. So at <= 16 query rows the result is bit for bit what mla_decode_bf16 gives on the
// dequantised BF16 cache with the same num_parts, and the CPU twin is the BF16 twin on that cache
// (quant/fp4_cache_format.hpp, quant/codebook_cache_format.hpp dequantise;
// quant/decode_twin_bf16.hpp decodes). Above 16 rows mla_decode_bf16 and its twin take the wgmma
// paths' rule (64-token tiles, the running-max slack) while this kernel keeps the 16-row one, so
// there the two agree within the GPU-vs-twin bounds, not bit for bit. Speed: 0.63-
// 0.70x FlashMLA's BF16 decode at H = 16 on an H200, consumer-bound (docs/benchmarks.md).
//
// Shapes: any s_q * heads query rows, in blocks of 16 (grid.y; each block's CTAs read and
// dequantise the cache themselves, so only <= 16 rows are fast), d_c in
// {32, 64, 128, 256, 512}, 2 d_r bytes of RoPE in {16, 32, 64} or a multiple of 128, pages of
// 64 or 128 tokens. Everything else of Bf16DecodeParams as for mla_decode_bf16 (q, out, lse
// bf16/fp32 as there; kv_cache points at the 4-bit pages). Three launches, no host sync.
#include <cuda_runtime.h>

#include "quant/decode_twin_bf16.hpp"

namespace mla::kernels {

enum class Kv4Format { Fp4, Codebook };

struct Kv4DecodeParams {
  quant::Bf16DecodeParams base;  // kv_cache: 4-bit pages; variant must be 0
  Kv4Format format = Kv4Format::Fp4;
  float levels[16] = {};  // the layer's codebook levels (format Codebook), ascending
};

// Bytes of one token in a page (400 at d_c = 512, d_r = 64 for FP4; 388 for codebook).
size_t kv4_bytes_per_token(Kv4Format f, int d_c, int d_r);

// Split-KV parts used when p.base.num_parts == 0 on the current device: one CTA per SM over the
// 16-row blocks, fitted to the batch (quant::decode_balanced_parts).
int kv4_decode_parts_for_device(const Kv4DecodeParams& p);
// Workspace bytes (the BF16 decode's layout; num_parts 0 means kv4_decode_parts_for_device).
size_t kv4_decode_workspace_bytes_for(const Kv4DecodeParams& p);

// Checks p (mla::InputError naming the field and value for an unsupported shape), then
// launches scheduler, split kernel and combine on `stream`.
void mla_decode_kv4(const Kv4DecodeParams& p, cudaStream_t stream);

}  // namespace mla::kernels
