#pragma once
// Shared-prefix (TyphoonMLA) decode on Hopper (sm_90a): the prefix-decompress step, the naive
// prefix attention kernel, the W_UV expansion + LSE merge, and the mixed step that runs them
// around the absorbed decode kernel (kernels/mla_decode.hpp). The parameter blocks, the math and
// the rounding points are documented in quant/prefix_twin_bf16.hpp (shared with the CPU twins).
//
// Kernels (BF16 tensor cores, fp32 accumulation):
//   decompress: one CTA per (64 prefix tokens, head): [64, d_c] x [d_c, d_n + d_v] per head
//               (mma.sync), rounded to bf16 into K (with k_pe copied) and V.
//   attention:  one CTA per (128 query rows, prefix split, head); rows = B * s_q is the GEMM's
//               M dimension, 64-token K/V tiles, online softmax in base 2. Head shape (192, 128):
//               wgmma, TMA ring, 2 consumer warpgroups of 64 rows in ping-pong
//               (prefix_attention_wgmma.cu); the tiny shape (96, 64): 8 warps of 16 rows on
//               mma.sync, K/V tiles double-buffered with cp.async (prefix_attention.cu).
//   merge:      one CTA per (64 rows, head): o_lat [64, d_c] x W_UV[h]^T, merged in the epilogue
//               with the prefix splits by natural-log LSE; bf16 output.
// All launches are asynchronous on `stream`, allocate nothing and do not synchronise the host.
#include <cuda_runtime.h>

#include "quant/prefix_twin_bf16.hpp"

namespace mla::kernels {

using quant::MixedDecodeParams;
using quant::PrefixAttnParams;
using quant::PrefixDecompressParams;
using quant::PrefixMergeParams;

// Host checks (mla::InputError naming the field), then one launch each.
void prefix_decompress_bf16(const PrefixDecompressParams& p, cudaStream_t stream);
void prefix_attn_bf16(const PrefixAttnParams& p, cudaStream_t stream);
void prefix_merge_bf16(const PrefixMergeParams& p, cudaStream_t stream);

// Prefix splits the mixed step uses for p on the current device (p.prefix_splits, or the default).
int mixed_prefix_splits(const MixedDecodeParams& p);
// Bytes of p.prefix_workspace the mixed step needs (0 when it falls back to absorb only).
size_t mixed_prefix_workspace_bytes(const MixedDecodeParams& p);

// One decode step: batch >= b_theta: prefix attention, absorbed decode of the own pages
// (p.suffix, with its own workspace), merge; else absorbed decode of the whole cache (p.full) and
// the W_UV expansion. Throws mla::InputError on bad parameters, mla::Error on launch errors.
void mixed_decode_bf16(const MixedDecodeParams& p, cudaStream_t stream);

}  // namespace mla::kernels
