#pragma once
// Host side shared by the decode paths (internal to kernels/): the workspace carving, the
// launch helper, and one launcher per role, each in its own .cu file:
//   decode_schedule.cu     split-KV scheduler (+ the wgmma paths' TMA descriptor)
//   decode_membound.cu     <= 16 query rows: mma.sync + bulk-copy producer ring
//   decode_mma64.cu        > 16 rows, shapes the wgmma paths do not cover (and variant 7)
//   decode_manyhead_v6.cu  > 16 rows, wgmma, 64-row blocks, warpgroups split the d_c columns
//   decode_manyhead_v7.cu  > 64 rows at d_c <= 256 (TPLA slices), wgmma, 128-row blocks
//   decode_combine.cu      LSE merge of a request's splits
// mla_decode.cu checks the parameters, picks the path and launches them in order; the FP8 and
// 4-bit decodes (fp8_decode.cu, kv4_decode.cu) reuse the workspace, scheduler and combine.
// CUDA errors are checked with cuda::check (kernels/cuda_check.hpp), like every host call here.
#include <cuda.h>
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda_check.hpp"
#include "quant/decode_twin_bf16.hpp"

namespace mla::kernels::detail {

// Launches kernel on `stream`; with pdl, as a programmatic dependent launch (it may start while
// the previous kernel runs and calls griddep_wait() before reading that kernel's output).
template <class... Exp, class... Act>
void launch(void (*kernel)(Exp...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, const char* what,
            Act&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cuda::check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Act>(args)...), what, "mla decode");
}

// The split kernels' grid: x = the row blocks of a part, y = the parts, so the row blocks that
// read the same K tiles are adjacent in launch order, start together on neighbouring SMs and
// stream the tiles in step (the second block's reads merge with the first's in L2). With the
// parts along x (the earlier order) they landed anywhere and drifted apart: on an H100 the v6
// path at H = 128, 8K measured 577-586 us rows-first against 588-669 us, varying by process,
// the other way (docs/gpu-notes.md, third session). Kernels read blockIdx.x as the row block
// and blockIdx.y as the part.
inline dim3 split_grid(int parts, int row_blocks) { return dim3(row_blocks, parts); }

// The workspace, carved as quant::decode_workspace_bytes counts it.
struct Workspace {
  int32_t* info;     // [num_parts * kPartInfoInts]
  int32_t* offsets;  // [batch + 1]
  int32_t* merge_cnt;  // [batch * quant::decode_merge_row_blocks] (v6's fused merge)
  float* lse_acc;    // [splits, rows]
  float* o_acc;      // [splits, rows, d_c]
};
Workspace carve(const quant::Bf16DecodeParams& p);

// No programmatic dependent launch on any path: with it, requests with several splits came back
// unwritten on the wgmma paths (docs/gpu-notes.md, "v4 fixed") and once on the memory-bound path
// (GraphCaptureReplaysTheSameResult, issue 10's first run); it gained 0.5-1%. The kernels keep
// their griddep_wait() (a no-op without the attribute) so it can be switched back here.
inline bool use_pdl(const quant::Bf16DecodeParams&) { return false; }

// Scheduler (tile: the split kernel's tokens per tile); also zeroes the merge counters. A planned
// call (p.planned) skips it.
void launch_schedule(const quant::Bf16DecodeParams& p, const Workspace& w, int tile, cudaStream_t stream);
// The wgmma paths' TMA descriptor of p's cache: a 2-D tensor [num_pages * page_size rows,
// d_c + d_r] bf16, box 64 columns x box_rows tokens, 128-byte swizzle (the wgmma K-major layout).
// Encoded on the host for each call and passed as a __grid_constant__ kernel parameter, so every
// call (and every layer's cache under one plan) has its own.
CUtensorMap make_kv_map(const quant::Bf16DecodeParams& p, int box_rows);
void launch_membound(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream);
void launch_mma64(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream);
void launch_manyhead_v6(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream);
#ifdef MLA_TIMELINE
// The diagnostic of kernels/timeline.cuh for v6: host == nullptr clears the event buffer, else copies
// its timeline::kWarps x timeline::kEvents words out (docs/gpu-notes.md, session 17).
void v6_timeline(uint64_t* host, cudaStream_t stream);
#endif
// Whether v6 merges the requests' splits itself (no combine launch): when every part holds whole
// requests at equal lengths (the part count divides the batch), so splits are rare and the fused
// merge only saves the combine's launch (+1% at 128 rows on an H200). Where the schedule cuts
// requests by design (33 parts for B = 128 at 256 rows, or two parts a request), nearly every CTA
// would end with a merge, and the combine kernel is faster (docs/gpu-notes.md, session 14).
inline bool v6_fuses_merge(const quant::Bf16DecodeParams& p) { return p.batch % p.num_parts == 0; }
void launch_manyhead_v7(const quant::Bf16DecodeParams& p, const Workspace& w, int row_blocks, cudaStream_t stream);
void launch_combine(const quant::Bf16DecodeParams& p, const Workspace& w, cudaStream_t stream);

}  // namespace mla::kernels::detail

#ifdef MLA_TIMELINE
namespace mla::kernels::fp8 {
// The same diagnostic for the FP8 64-row split kernel (kernels/fp8_decode_rows64.cu) and the
// narrow (<= 32 rows) one (kernels/fp8_decode_narrow.cu; FP8 or FP4 pages).
void rows64_timeline(uint64_t* host, cudaStream_t stream);
void narrow_timeline(uint64_t* host, cudaStream_t stream);
}  // namespace mla::kernels::fp8
#endif
