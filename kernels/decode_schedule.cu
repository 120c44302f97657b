// Split-KV scheduler: quant::compute_decode_schedule's closed form on the device
// (kernels/decode_schedule.cuh); same output as the host. It also zeroes v6's merge counters.
#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_schedule.cuh"
#include "kernels/mla_decode.hpp"

namespace mla::kernels {
namespace detail {
namespace {

// cnt [n_cnt]: the fused merge's ticket counters, zeroed (nullptr: none).
__global__ void __launch_bounds__(kSchedThreads) decode_schedule_kernel(const int32_t* __restrict__ seqlens, int batch,
                                                                        int tile, int parts, int32_t* info,
                                                                        int32_t* offsets, int32_t* cnt, int n_cnt) {
  __shared__ typename ScheduleScan::TempStorage tmp;
  griddep_launch_dependents();  // the split kernel may start its prologue; it waits for us
  for (int i = threadIdx.x; i < n_cnt; i += kSchedThreads) cnt[i] = 0;
  decode_schedule_block(seqlens, batch, tile, parts, info, offsets, tmp);
}

}  // namespace

void launch_schedule(const quant::Bf16DecodeParams& p, const Workspace& w, int tile, cudaStream_t stream) {
  decode_schedule_kernel<<<1, kSchedThreads, 0, stream>>>(p.seqlens, p.batch, tile, p.num_parts, w.info, w.offsets,
                                                           w.merge_cnt,
                                                           p.batch * quant::decode_merge_row_blocks(p.s_q, p.heads));
  cuda::check(cudaGetLastError(), "schedule launch", "mla decode");
}

}  // namespace detail

void decode_schedule_on_device(const int32_t* seqlens, int batch, int tile, int num_parts, int32_t* info,
                               int32_t* offsets, cudaStream_t stream) {
  detail::decode_schedule_kernel<<<1, detail::kSchedThreads, 0, stream>>>(seqlens, batch, tile, num_parts, info,
                                                                           offsets, nullptr, 0);
  cuda::check(cudaGetLastError(), "schedule launch", "mla decode");
}

}  // namespace mla::kernels
