#pragma once
// mla-bench's library part: ceilings (copy/read bandwidth, cuBLAS BF16 GEMM) and decode timing.
#include <string>

namespace mla::bench {

struct Options {
  int batch = 128, heads = 16, d_c = 512, d_r = 64, seqlen = 4096, page = 64, s_q = 1;
  bool varied = false;  // seqlens uniform in [seqlen/2, seqlen*3/2] instead of all equal
  bool sequential_pages = false;  // page table in pool order (diagnostic) instead of a random permutation
  int variant = 0;  // see Bf16DecodeParams::variant (0 = default path, 7 = mma.sync 64-row path)
  int runs = 50, warmup = 5;
  bool ceilings = true;
  bool torch_baseline = false;
  std::string python = "python3";
};

// Runs everything and returns the results as a JSON text; prints a human summary to stdout.
std::string run_bench(const Options& o);

}  // namespace mla::bench
