#pragma once
// The split-KV walk the decode twins share (decode_twin_bf16, fp8_decode_twin): the GPU's schedule
// (compute_decode_schedule) run part by part on the CPU, whole requests written directly, the
// others' splits merged as the combine kernel merges them (kernels/decode_store.cuh: natural-log
// LSE in fp32, each split weighted by exp(lse_s - lse), rounded to bf16 once). Each twin brings
// its own per-segment arithmetic (run_split); the walk and the merge are one code.
#include <cstdint>
#include <functional>
#include <vector>

namespace mla::quant {

// One request segment's result: normalised partial outputs [rows, d_c] and natural-log LSEs [rows].
struct TwinSplit {
  std::vector<float> o;
  std::vector<float> lse;
};

// What the walk needs of a decode's parameters. what: the twin's name for its errors.
struct TwinWalk {
  const int32_t* seqlens;
  int batch, max_pages, page_size;
  int tile_tokens;  // the split kernel's tile (the schedule cuts requests at tile boundaries)
  int parts;        // split-KV parts, as the GPU call used
  int rows, d_c;    // query rows (s_q * heads) and output columns
  uint16_t* out;    // [batch, rows, d_c] bf16
  float* lse;       // [batch, rows]
  const char* what;
};

// run_split(b, tile_begin, tile_end): request b's tiles [tile_begin, tile_end). Throws InputError
// for a length outside [0, max_pages * page_size].
void run_decode_twin_walk(const TwinWalk& w, const std::function<TwinSplit(int, int, int)>& run_split);

}  // namespace mla::quant
