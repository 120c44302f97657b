#pragma once
// mla-bench --tp N: one decode step of one attention layer on N GPUs (one thread per GPU, NCCL),
// DeepSeek-V3 shapes, for each parallel mode:
//   head-parallel  each GPU all d_c = 512 latent dims, H/N heads, the whole cache (MLA under TP);
//   tpla           each GPU all H heads, d_c/N latent dims (g = N), its cache slice;
//   tpla-g<g>      g latent slices, each shared by N/g GPUs that split the heads (H g/N heads, d_c/g);
//   dcp            each GPU all H heads, full latent, 1/N of the tokens (decode context
//                  parallelism); partial outputs merged by log-sum-exp across GPUs.
// Step = q projection (q_b_proj, W_UK absorption) + decode kernel + [dcp: LSE all-gather and
// rescale] + W_UV and o_proj + all-reduce of the o_proj outputs (+ tpla --norm exact: one float
// per token all-reduced). Per-rank CUDA events split the step; a roofline prediction from the
// same run's measured copy bandwidth, GEMM rate and NCCL bus bandwidth stands beside each part.
#include <string>
#include <vector>

namespace mla::bench {

struct TpOptions {
  int tp = 2;
  std::vector<std::string> modes{"head-parallel", "tpla", "dcp"};
  int batch = 128;
  std::vector<int> seqlens{8192, 32768};
  int page = 64;
  bool norm_exact = true;   // tpla: include the exact-norm all-reduce (B floats) in the step
  int runs = 30, warmup = 5;
  double kv_budget_gib = 80.0;  // capacity view: per-GPU KV budget for all layers
  // Only rank 0 of each mode, on GPU 0 (a one-GPU machine): the per-device work is measured,
  // the collectives are 1-rank no-ops and their time is predicted from these two figures.
  bool one_gpu = false;
  double assumed_busbw_gbs = 350.0;   // NCCL all-reduce bus bandwidth over NVLink (2 GPUs)
  double assumed_latency_us = 15.0;   // small-message all-reduce latency
};

// Runs everything, prints a human summary, returns the results as JSON text. Throws mla::Error
// without NCCL or with fewer than tp GPUs.
std::string run_tp_bench(const TpOptions& o);

}  // namespace mla::bench
