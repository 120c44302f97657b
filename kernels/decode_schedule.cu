// Split-KV scheduler: quant::compute_decode_schedule's closed form on the device
// (kernels/decode_schedule.cuh); same output as the host. It also hands the wgmma paths their
// TMA descriptor through the workspace.
#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_schedule.cuh"
#include "kernels/mla_decode.hpp"
#include "kernels/tensor_map.hpp"

namespace mla::kernels {
namespace detail {
namespace {

// The scheduler kernel: decode_schedule_block, and the wgmma paths' TMA descriptor.
__global__ void __launch_bounds__(kSchedThreads) decode_schedule_kernel(const int32_t* __restrict__ seqlens, int batch,
                                                                        int tile, int parts, int32_t* info,
                                                                        int32_t* offsets,
                                                                        const CUtensorMap map, CUtensorMap* map_out) {
  __shared__ typename ScheduleScan::TempStorage tmp;
  griddep_launch_dependents();  // the split kernel may start its prologue; it waits for us
  if (map_out != nullptr && threadIdx.x == 0) {  // the wgmma path's TMA descriptor, into the workspace
    *map_out = map;
    asm volatile("fence.proxy.tensormap::generic.release.gpu;\n" ::: "memory");
  }
  decode_schedule_block(seqlens, batch, tile, parts, info, offsets, tmp);
}

// The cache as a 2-D tensor [num_pages * page_size rows, d_c + d_r] bf16; box 64 columns x
// box_rows tokens (the path's tile: 32 for v4/v5, 64 for v6), 128-byte swizzle (the wgmma K-major layout); columns past d_c + d_r read as zeros.
CUtensorMap make_kv_map(const quant::Bf16DecodeParams& p, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dim = static_cast<cuuint64_t>(p.d_c + p.d_r);
  const cuuint64_t gdim[2] = {dim, static_cast<cuuint64_t>(p.num_pages) * p.page_size};
  const cuuint64_t gstride[1] = {dim * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = cuda::encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(p.kv_cache),
                                          gdim, gstride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error("mla decode: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return m;
}

}  // namespace

void launch_schedule(const quant::Bf16DecodeParams& p, const Workspace& w, int tile, bool with_map, int box_rows,
                     cudaStream_t stream) {
  // A __grid_constant__ map parameter was read stale by launches that followed other launches
  // (docs/gpu-notes.md, v4): the scheduler writes it into the workspace instead.
  const CUtensorMap map = with_map ? make_kv_map(p, box_rows) : CUtensorMap{};
  decode_schedule_kernel<<<1, kSchedThreads, 0, stream>>>(p.seqlens, p.batch, tile, p.num_parts, w.info, w.offsets,
                                                           map, with_map ? w.map : nullptr);
  cuda::check(cudaGetLastError(), "schedule launch", "mla decode");
}

}  // namespace detail

void decode_schedule_on_device(const int32_t* seqlens, int batch, int tile, int num_parts, int32_t* info,
                               int32_t* offsets, cudaStream_t stream) {
  detail::decode_schedule_kernel<<<1, detail::kSchedThreads, 0, stream>>>(seqlens, batch, tile, num_parts, info,
                                                                           offsets, CUtensorMap{}, nullptr);
  cuda::check(cudaGetLastError(), "schedule launch", "mla decode");
}

}  // namespace mla::kernels
