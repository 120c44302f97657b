#pragma once
// FP8 paged absorbed-MLA decode on Hopper (sm_90a), SnapMLA-style: the cache in the FP8 format of
// quant/fp8_cache_layout.hpp (644 B per token at d_c = 512), QK^T and PV on FP8 tensor cores
// (wgmma e4m3, the RoPE part in BF16 wgmma into the same accumulator), the per-token key scale
// folded into P, P re-quantised to E4M3 per 64-token block with the block scale folded into the
// online softmax; split-KV + LSE combine as the BF16 decode. The numerics, parameter block and
// schedule are quant/fp8_decode_twin.hpp's (the CPU twin).
//
// Shapes on the GPU: heads 1..128, s_q 1..2, d_c 128/256/512, d_r 32/64, pages 64/128.
// fp8_decode_bf16q quantises a bf16 query into the workspace (fp8_quantize_query's encoding,
// kernels/fp8_append.hpp), in the split kernel (<= 32 rows) or the scheduler's launch.
// No host synchronisation and no allocation: capturable in a CUDA graph.
#include <cuda_runtime.h>

#include "quant/fp8_decode_twin.hpp"

namespace mla::kernels {

// Whether the GPU kernel takes p's shape (the twin takes more).
bool fp8_decode_shape_supported(const quant::Fp8DecodeParams& p);
// Split-KV parts used when p.num_parts == 0 on the current device.
int fp8_decode_parts_for_device(const quant::Fp8DecodeParams& p);
// Workspace bytes for p's shape (schedule, split partials, merge counters); with_query also counts the
// quantised query that fp8_decode_bf16q writes (q8, q_rope, q_scale).
size_t fp8_decode_workspace_bytes(const quant::Fp8DecodeParams& p, bool with_query = false);
// Byte offsets in that workspace of the query fp8_decode_bf16q writes: q8 [rows, d_c] e4m3,
// q_rope [rows, d_r] bf16, q_scale [rows] fp32 (rows = batch s_q heads), with p.num_parts
// (0: the device default).
struct Fp8QueryOffsets {
  size_t q8, q_rope, q_scale;
};
Fp8QueryOffsets fp8_decode_query_offsets(const quant::Fp8DecodeParams& p);

// The split-KV schedule of p's seqlens (and the merge counters) into p.workspace on `stream`:
// what a decode with p.planned = true reads instead of scheduling itself. Like FlashMLA's
// get_mla_metadata: once per decode step, before the layers' decodes, which must then use the
// same seqlens values, batch, s_q, heads, d_c, d_r, num_parts and workspace (and no other
// decode may use that workspace in between). mla::InputError on a bad shape or workspace.
void fp8_decode_plan(const quant::Fp8DecodeParams& p, cudaStream_t stream);
// Checks p on the host (mla::InputError naming the field), launches the scheduler (unless
// p.planned), the split kernel and the combine on `stream` (requests of <= 32 query rows: the
// split kernel merges the splits itself, no combine launch). p.q8 / q_rope / q_scale: the
// quantised query.
void fp8_decode(const quant::Fp8DecodeParams& p, cudaStream_t stream);
// The same from a bf16 query q [batch, s_q, heads, d_c + d_r]: quantises it into the workspace
// (p.q8 etc. are ignored; fp8_decode_query_offsets), then as fp8_decode. With <= 32 query rows and
// q 16-byte aligned the split kernel quantises it (the first split of each request writes the
// workspace copy), so a planned decode is one launch; otherwise the scheduler's launch does.
// Needs fp8_decode_workspace_bytes(p, true).
void fp8_decode_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream);

// The FP8-tensor-core route of the FP4 cache: p.cache holds FP4 pages (quant/fp4_cache_layout.hpp,
// 400 B per token at d_c = 512), each 64-token tile rewritten in shared memory as the FP8 tile
// quant::fp4_cache_to_fp8 gives (exact whenever a token's group exponents span <= 11 octaves),
// then decoded as fp8_decode_bf16q decodes FP8 pages: the result equals fp8_decode_bf16q on
// quant::fp4_cache_to_fp8 of the pages, bit for bit, with the same num_parts. Query rows (s_q H):
// <= 32 (the narrow kernel) or more (the 64-row kernel), except > 64 rows at d_c <= 256 (the
// 128-row TPLA-slice kernel reads no FP4); d_c 128/256/512, d_r 32/64, pages 64/128;
// mla::InputError otherwise.
// Workspace: fp8_decode_workspace_bytes(p, true).
void fp8_decode_fp4_cache_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream);

}  // namespace mla::kernels
