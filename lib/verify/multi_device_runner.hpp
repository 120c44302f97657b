#pragma once
// The multi-device TPLA decode runner: one thread per rank, rank r on device r, each holding its
// rank's converted weights and its own paged latent-slice cache, talking only through a
// Communicator (NCCL on GPUs, the in-process stand-in on the CPU). Per layer, every rank:
//   prefill (PD separation): all-reduces one sum of squares per prompt token ("norm_sumsq"),
//     so its cache rows are its slice of the exact global x = c / rms(c), and appends them;
//   per decode token: computes its c_k, k_pe and absorbed query from the replicated input h;
//     under --norm exact all-reduces one sum of squares per token ("norm_sumsq", B values),
//     otherwise normalises locally (sqrt(g f_k) folded in its kv_a_layernorm); appends
//     [x_k | k_pe] into its cache (the BF16 cache, or the format set_backend_factory gives:
//     FP8, FP4, codebook) and decodes its heads on its slice (kernels or their twins); expands
//     with its W_UV and applies its o_proj columns; all-reduces the partial outputs ("o_proj",
//     B x D values).
// Nothing else crosses ranks. With g < tp the ranks of one latent group hold the same slice,
// so each contributes its sum of squares divided by tp/g (exact for powers of two).
//
// The arithmetic is the one-device sequential path's (verify_decode.cpp), rank by rank, so the
// result equals the sequential sum of the ranks' partial outputs up to the order of the
// all-reduce's float64 additions: bit-identical for 2 ranks (a + b either way), within
// (tp - 1) ulp-scale differences otherwise (kDevicesRelTolerance).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "io/converted_checkpoint.hpp"
#include "model/config.hpp"

namespace mla::verify {

class Communicator;
class DecodeBackend;

// Makes one TPLA rank's decode backend (its cache format: verify-decode --kv), called on the
// rank's thread after the rank's device is selected, once per layer; the runner then calls
// begin_layer(layer) on it.
using BackendFactory = std::function<std::unique_ptr<DecodeBackend>()>;

// Relative L2 within which the runner's output must equal the one-device sequential sum.
inline constexpr double kDevicesRelTolerance = 1e-13;

struct RankPlacement {
  int rank = 0;
  int device = 0;    // CUDA device (cuda) or thread index (cpu)
  int group = 0;     // latent group k
  int64_t heads = 0;           // heads the rank decodes
  int64_t latent_width = 0;    // d_c / g
};

struct ReductionRecord {
  int64_t layer = 0;
  std::string tag;  // "norm_sumsq" | "o_proj"
  size_t count = 0;
  bool operator==(const ReductionRecord&) const = default;
};

class MultiDeviceRunner {
 public:
  // device "cuda": rank r on CUDA device r, NCCL; "cpu": rank r on thread r, CPU twin, the
  // in-process communicator. comm "threads" with "cuda": rank r's kernels on GPU r mod (visible
  // GPUs), sums through the in-process communicator (a one-GPU machine runs the same ranks
  // concurrently; no NCCL). Throws InputError/Error naming what is missing.
  MultiDeviceRunner(const std::string& device, int devices, const std::string& comm = "auto");
  ~MultiDeviceRunner();
  MultiDeviceRunner(const MultiDeviceRunner&) = delete;
  MultiDeviceRunner& operator=(const MultiDeviceRunner&) = delete;

  std::string name() const;
  int devices() const { return devices_; }
  // The TPLA ranks' cache format (decode_layer); without one they use the BF16 backend of the
  // runner's device. DCP ranks always use the BF16 backend.
  void set_backend_factory(BackendFactory f) { make_backend_ = std::move(f); }

  // One layer: sequences h[b] [P + T, D] (replicated on every rank), the ranks' attention
  // (ranks.size() must equal devices()), the original config (global d_c, eps). Returns the
  // all-reduced output of every decoded token, per sequence [T, D] (every rank holds the same;
  // rank 0's is returned). Page placement: the sequential path's (seed + 7919 r).
  std::vector<MatrixR> decode_layer(int64_t layer, const model::MlaConfig& cfg,
                                    const std::vector<io::RankAttention>& ranks, const std::vector<MatrixR>& h,
                                    int64_t P, int64_t T, int page_size, uint64_t seed);

  // Decode context parallelism (DCP, the exact alternative to TPLA): every rank holds the
  // full-width latent cache of every devices()-th token (token t on rank t mod N, prompt and
  // decoded tokens alike), decodes ALL heads of `full` (a tp = 1 conversion's layer) over its
  // tokens, and the partial outputs are merged by log-sum-exp across ranks: the ranks' LSEs are
  // gathered ("dcp_lse", an all-reduce of an N x B x H buffer each rank fills its row of),
  // each rank scales its latent output by exp(lse_r - lse_total), applies W_UV and o_proj (linear,
  // so the scaled partials sum to the exact output) and the partials are all-reduced ("o_proj").
  // Queries are computed on every rank (replicated q projection). Returns [T, D] per sequence.
  std::vector<MatrixR> decode_layer_dcp(int64_t layer, const model::MlaConfig& cfg, const io::RankAttention& full,
                                        const std::vector<MatrixR>& h, int64_t P, int64_t T, int page_size,
                                        uint64_t seed);

  // Bookkeeping of the last decode_layer calls (for tests and logs).
  const std::vector<RankPlacement>& placement() const { return placement_; }
  // Every all-reduce each rank made, in order, since construction.
  const std::vector<std::vector<ReductionRecord>>& reductions() const { return reductions_; }

 private:
  std::string device_;
  int devices_ = 0;
  bool nccl_ = false;
  int visible_gpus_ = 0;
  int gpu_of(int rank) const { return visible_gpus_ > 0 ? rank % visible_gpus_ : rank; }
  std::vector<std::unique_ptr<Communicator>> comms_;
  BackendFactory make_backend_;
  std::vector<RankPlacement> placement_;
  std::vector<std::vector<ReductionRecord>> reductions_;
  // Runs fn(rank) on one thread per rank; the first rank that failed on its own is reported.
  template <class F>
  void on_every_rank(F&& fn);
};

}  // namespace mla::verify
