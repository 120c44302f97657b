#pragma once
// BF16 paged absorbed-MLA decode on Hopper (sm_90a): device-side split-KV scheduler, split
// kernel (<= 16 query rows: mma.sync with a bulk-copy producer ring; more rows: wgmma with a TMA
// ring and 64-token tiles), LSE combine kernel. kernels/decode_launch.hpp lists the file of each
// role.
// The parameter block, the math, the causal rule for s_q = 2, the rounding points and the
// schedule are documented in quant/decode_twin_bf16.hpp (shared with the CPU twin).
//
// Shapes (all pointers device memory; Bf16DecodeParams carries the shape comments):
//   q        [batch, s_q, heads, d_c + d_r]  bf16
//   kv_cache [num_pages, page_size, d_c + d_r] bf16 ([x | k_pe] per token)
//   page_table int32 [batch, max_pages], seqlens int32 [batch]
//   out      [batch, s_q, heads, d_c] bf16, lse [batch, s_q, heads] fp32 (natural log)
// Scheduler, split kernel, combine on `stream` (no scheduler for a planned call; no combine where
// the v6 split kernel merges the splits itself), no host synchronisation, no allocation:
// capturable in a graph.
#include <cuda_runtime.h>

#include "quant/decode_twin_bf16.hpp"

namespace mla::kernels {

using quant::Bf16DecodeParams;

// Parts (CTA columns) mla_decode_bf16 uses when p.num_parts == 0, on the current device (only
// p's shape and variant are read).
int decode_parts_for_device(const Bf16DecodeParams& p);

// Workspace bytes for p's shape and its effective number of parts.
size_t decode_workspace_bytes_for(const Bf16DecodeParams& p);

// Checks p on the host (shapes, pointers, workspace size: mla::InputError naming the field),
// then launches scheduler, split kernel and combine on `stream`. Launch errors throw mla::Error.
// With p.planned the schedule is the one mla_decode_bf16_plan left in p's workspace.
void mla_decode_bf16(const Bf16DecodeParams& p, cudaStream_t stream);

// The split schedule alone, into p's workspace (one launch on `stream`): what a serving step runs
// once before its layers' calls with p.planned = true. It depends on p's seqlens (device memory,
// read when the launch runs), shape (batch, s_q, heads, d_c, d_r), variant, num_parts and
// workspace, not on the cache, query or outputs; a change to any of the former needs a new plan
// (the device cannot check).
// Same host checks as mla_decode_bf16.
void mla_decode_bf16_plan(const Bf16DecodeParams& p, cudaStream_t stream);

// The device scheduler alone (for tests: it must equal quant::compute_decode_schedule).
// seqlens [batch], info [num_parts * quant::kPartInfoInts], offsets [batch + 1]: device memory.
void decode_schedule_on_device(const int32_t* seqlens, int batch, int tile, int num_parts, int32_t* info,
                               int32_t* offsets, cudaStream_t stream);

}  // namespace mla::kernels
