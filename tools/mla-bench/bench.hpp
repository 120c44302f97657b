#pragma once
// mla-bench's library part: ceilings (copy/read bandwidth, cuBLAS BF16 GEMM) and decode timing.
#include <cstdint>
#include <string>
#include <vector>

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

// The decode problem both modes time: o.batch requests of o.seqlen tokens (or, --varied, uniform
// in [L/2, 3L/2]), their pages a random permutation of the pool (or, --sequential-pages, in pool
// order); slots past a request's pages hold 0.
struct PagedProblem {
  std::vector<int32_t> seqlens, table;  // [batch], [batch, max_pages]
  int max_pages = 1;
  long long total_pages = 0, total_tokens = 0;
};
PagedProblem make_paged_problem(const Options& o);

// mla-bench --kv fp8 | fp4 | codebook: the quantised cache's decode (each route the shape has)
// beside the BF16 decode on the same values, lengths and page table (kv_bench.cu).
std::string run_kv_bench(const Options& o, const std::string& kv);

}  // namespace mla::bench
