#pragma once
// mla-convert's library side: a Hugging Face MLA checkpoint -> one HF checkpoint per TPLA rank
// (SPEC section 2; docs/formats/converted-checkpoint.md; docs/sharding.md).
//
// Streaming: the work is split into units (one distinct slice of an input tensor, or one
// layer's latent triple kv_a_proj_with_mqa + kv_a_layernorm + kv_b_proj, which the rotation
// couples); `threads` workers take units in output-file order and write each rank's bytes at
// planned offsets, so the output is byte-identical for every thread count. Memory is bounded
// independently of the layer count: encoded slices in flight share a byte budget, output held
// for the streaming SHA-256 another (beyond it, bytes are read back from the file), and input
// pages are dropped once read. Each output file is hashed while it is written, input files on
// the side (several at once), so no pass over the data is serial with the conversion.
// Everything is validated (rules, divisibility, calibration, presence of every attention
// tensor) before anything is written; errors during the run (NaN/Inf in a weight) leave no
// output directory (io::AtomicDirectory).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "model/attention_reference.hpp"
#include "model/config.hpp"
#include "transform/reparam.hpp"
#include "transform/tpla.hpp"

namespace mla::transform {

enum class OutDtype { BF16, FP8 };
std::string_view out_dtype_name(OutDtype d);
OutDtype parse_out_dtype(std::string_view name);

struct ConvertOptions {
  std::filesystem::path input;   // HF checkpoint directory
  std::filesystem::path output;  // must not exist; must not be the input
  int tp = 1;
  int groups = 0;                // g; 0 means g = tp (every rank holds 1/tp of the latent)
  Reparam reparam = Reparam::Identity;
  std::optional<uint64_t> seed;  // Hadamard random-sign seed; none: plain Sylvester
  std::filesystem::path calib;   // calib.h5 (required for pca); empty: f = 1/g, mu = 1
  NormMode norm = NormMode::Approx;
  OutDtype out_dtype = OutDtype::BF16;
  bool absorb = false;           // also write per-head W_UK / W_UV
  std::string kv_cache = "bf16";  // serving KV format recorded in the outputs (transform/kv_cache_meta.hpp)
  // fp4 | codebook: the quantisation rotation folded into the weights (transform/kv4_params.hpp):
  // hadamard (per TPLA slice, after the basis) or none (the study's alternative).
  std::string kv_rotation = "hadamard";
  bool dry_run = false;
  int threads = 1;               // does not change the output bytes
  uint64_t max_shard_bytes = 5ull << 30;
  // Scheduling knobs (0: the defaults, transform/schedule.hpp kUnitBytes and 1 GiB); they do
  // not change the output bytes. unit_bytes: slices above it become row-chunk units;
  // hold_bytes: output kept in memory for the streaming SHA-256, which also bounds the output
  // started and not yet hashed (OutputGate).
  uint64_t unit_bytes = 0;
  uint64_t hold_bytes = 0;
};

struct RankPlan {
  int rank = 0;
  int group = 0;
  Range heads;
  Range latent;
  std::vector<io::TensorSpec> tensors;  // sorted by name
  uint64_t bytes = 0;
};

// Where the time went (mla-convert --profile; "profile" in --json). `phases`: per phase the
// elapsed time and CPU time summed over every thread that ran it, and its bytes, so bytes /
// cpu_seconds is one core's rate on that phase and seconds / wall time the average number of
// threads in it; `wall`: the run's sequential steps.
struct PhaseFigure {
  std::string name;
  double seconds = 0.0;      // elapsed, summed over threads
  double cpu_seconds = 0.0;  // CPU time of those threads in the phase
  uint64_t bytes = 0;
  uint64_t calls = 0;
};
struct ConvertProfile {
  int threads = 1;
  std::vector<PhaseFigure> phases;
  std::vector<std::pair<std::string, double>> wall;
  double cpu_user_seconds = 0.0, cpu_system_seconds = 0.0;
  int64_t peak_rss_kb = 0;  // of the process so far (getrusage ru_maxrss)
  uint64_t hash_hold_peak_bytes = 0;  // most output held in memory for the streaming hash
  uint64_t gate_peak_bytes = 0;       // most output started and not yet hashed (0: the gate was off)
};

struct ConvertResult {
  std::vector<RankPlan> ranks;
  int g = 1;
  int64_t attention_layers = 0;
  int64_t kv_bytes_per_token_per_device = 0;  // BF16 cache [x_k | k_pe], all layers
  int64_t kv_bytes_per_token_mla = 0;         // the unsliced cache, for comparison
  uint64_t input_bytes = 0;                   // tensor bytes read
  uint64_t output_bytes = 0;                  // tensor bytes written (all ranks)
  double seconds = 0.0;
  std::string fingerprint;                    // of the input checkpoint
  nlohmann::json manifest;                    // as written (empty on dry-run)
  ConvertProfile profile;
};

ConvertResult convert_checkpoint(const ConvertOptions& opts);
// Human-readable plan (per rank: tensors, bytes; KV bytes per token per device).
std::string describe_plan(const ConvertResult& r, bool list_tensors);
nlohmann::json result_json(const ConvertResult& r);
// The profile as a table: per phase thread-seconds, CPU-seconds, bytes, one core's rate, threads busy.
std::string describe_profile(const ConvertResult& r);

}  // namespace mla::transform
