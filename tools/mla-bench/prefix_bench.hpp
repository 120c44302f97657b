#pragma once
// mla-bench --prefix: shared-prefix (TyphoonMLA) decode timing. For each head count, prefix
// length and batch: the mixed step (naive prefix + absorbed own pages + W_UV merge) against
// absorb-only over the same cache (absorbed kernel + the same W_UV expansion), with the parts
// timed alone; the measured crossover batch beside the cost model's B_theta; ceilings (copy
// bandwidth, cuBLAS BF16 GEMM rate) measured in the same process.
#include <string>
#include <vector>

namespace mla::bench {

struct PrefixOptions {
  std::vector<int> heads{64, 128};
  std::vector<int> prefixes{26472, 4096};
  std::vector<int> batches{64, 128, 256, 512, 1024};
  // Extra batches timed only to locate the crossover (absorb-only vs mixed).
  std::vector<int> crossover_batches{4, 8, 12, 16, 24, 32, 48, 64, 96};
  int suffix = 512;  // own tokens per request (incl. the s_q new ones)
  int s_q = 1;
  int page = 64;
  int runs = 10, warmup = 2;
};

// Runs everything; prints a table per shape to stdout and returns all figures as JSON.
std::string run_prefix_bench(const PrefixOptions& o);

}  // namespace mla::bench
