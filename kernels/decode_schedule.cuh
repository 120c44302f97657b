#pragma once
// The split-KV scheduler's body (quant::compute_decode_schedule's closed form, one thread per
// request, block-wide prefix sums over chunks of kSchedThreads requests; same output as the
// host), for the scheduler kernel (kernels/decode_schedule.cu) and the FP8 decode's prologue
// kernel (kernels/fp8_decode.cu), which runs it in its first block.
#include <cub/block/block_scan.cuh>

#include "quant/decode_twin_bf16.hpp"

namespace mla::kernels::detail {

constexpr int kSchedThreads = 512;
using ScheduleScan = cub::BlockScan<long long, kSchedThreads>;

// All kSchedThreads threads of the block call it (block-wide scans and barriers inside).
__device__ __forceinline__ void decode_schedule_block(const int32_t* __restrict__ seqlens, int batch, int tile,
                                                      int parts, int32_t* info, int32_t* offsets,
                                                      typename ScheduleScan::TempStorage& tmp) {
  using quant::kPartInfoInts;
  using Scan = ScheduleScan;
  const int tid = threadIdx.x;
  long long mine = 0;
  for (int b = tid; b < batch; b += kSchedThreads) mine += quant::decode_tiles(seqlens[b], tile) + quant::kFixedCost;
  long long ignore = 0, total = 0;
  Scan(tmp).ExclusiveSum(mine, ignore, total);
  __syncthreads();
  const long long per_part = (total + parts - 1) / parts;
  long long carry_s = 0, carry_off = 0;
  for (int base = 0; base < batch; base += kSchedThreads) {
    const int b = base + tid;
    const bool valid = b < batch;
    const int n_b = valid ? quant::decode_tiles(seqlens[b], tile) : 0;
    long long s_b = 0, agg_s = 0;
    Scan(tmp).ExclusiveSum(valid ? static_cast<long long>(n_b + quant::kFixedCost) : 0LL, s_b, agg_s);
    __syncthreads();
    s_b += carry_s;
    const long long segs =
        valid ? quant::decode_last_part(s_b, n_b, per_part) - quant::decode_first_part(s_b, per_part) + 1 : 0;
    long long off_b = 0, agg_off = 0;
    Scan(tmp).ExclusiveSum(segs, off_b, agg_off);
    __syncthreads();
    off_b += carry_off;
    if (valid) {
      offsets[b] = static_cast<int32_t>(off_b);
      quant::decode_write_parts_of_request(b, s_b, n_b, static_cast<int>(off_b), per_part, parts, info);
    }
    carry_s += agg_s;
    carry_off += agg_off;
  }
  const long long first_empty = (total + per_part - 1) / per_part;
  for (long long pp = first_empty + tid; pp < parts; pp += kSchedThreads)
    quant::decode_write_tail_part(static_cast<int>(pp), batch, static_cast<int>(carry_off), info);
  __syncthreads();
  if (tid == 0) {
    offsets[batch] = static_cast<int32_t>(carry_off);
    info[(parts - 1) * kPartInfoInts + 2] = batch;
    info[(parts - 1) * kPartInfoInts + 3] = 0;
  }
}

}  // namespace mla::kernels::detail
