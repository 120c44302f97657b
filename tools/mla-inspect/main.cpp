// mla-inspect <checkpoint>: family, MLA dimensions, dtypes, parameter counts by part, KV cache
// bytes per token (BF16/FP8/FP4) and per device for head-parallel MLA vs TPLA tp=2,4,8.
// Opening the checkpoint validates every shard header, the index and the FP8 scale shapes.
#include <spdlog/spdlog.h>

#include <chrono>
#include <iostream>

#include "common/cli_common.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_scan.hpp"
#include "io/fingerprint.hpp"
#include "io/inspect.hpp"
#include "model/prefix_cost.hpp"

namespace {
struct Options {
  std::string checkpoint;
  bool fingerprint = false;
  bool scan = false;
  int threads = 0;
  // --prefix: the shared-prefix (TyphoonMLA) cost model instead of (or beside) the checkpoint.
  int64_t prefix = 0, batch = 512, own = 512, s_q = 1;
  std::string shape = "kimi-k2";
  double gemm_tflops = 989.0, bandwidth_gbs = 4800.0;
};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Describe an MLA checkpoint (DeepSeek-V2/V3, Kimi-K2): dims, dtypes, parameters, KV cache sizes"};
  mla::cli::CommonOptions common;
  Options opts;
  auto* ckpt_opt = app.add_option("checkpoint", opts.checkpoint, "Checkpoint directory (config.json + safetensors)");
  app.add_option("--prefix", opts.prefix,
                 "Shared-prefix cost model (TyphoonMLA Table 1) for a prefix of this many tokens: MACs and bytes of "
                 "naive, absorb and mixed decode, B_theta, HBM of the decompressed prefix (dims from the checkpoint, "
                 "or --shape)")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--batch", opts.batch, "--prefix: requests B sharing the prefix")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--own", opts.own, "--prefix: own (non-shared) tokens per request L_n")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--sq", opts.s_q, "--prefix: query tokens per request per step (2 with MTP)")->capture_default_str()->check(CLI::Range(1, 16));
  app.add_option("--shape", opts.shape, "--prefix without a checkpoint: kimi-k2 (H=64) or deepseek-v3 (H=128)")
      ->capture_default_str()->check(CLI::IsMember({"kimi-k2", "deepseek-v3"}));
  app.add_option("--gemm-tflops", opts.gemm_tflops, "--prefix: dense BF16 rate T (measure with mla-bench; default H200 peak)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--bandwidth-gbs", opts.bandwidth_gbs, "--prefix: HBM bandwidth M (measure with mla-bench; default H200 peak)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--fingerprint", opts.fingerprint,
               "Also print the attention fingerprint (SHA-256 over config + every layer's kv_a/kv_b/norm bytes)");
  app.add_flag("--scan", opts.scan,
               "Also read every byte and reject non-finite values and non-positive FP8 scales (cost: one pass over the files)");
  app.add_option("--threads", opts.threads, "Threads for --scan (0: all cores; with --scan only)");
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&] {
    // Options that qualify another one: refused without it, so that no setting is silently ignored.
    mla::cli::require_with(app, opts.prefix > 0,
                           {"--batch", "--own", "--sq", "--shape", "--gemm-tflops", "--bandwidth-gbs"}, "--prefix");
    if (opts.prefix > 0) {
      for (const char* opt : {"--scan", "--fingerprint", "--threads"})
        if (app.count(opt) > 0)
          throw mla::InputError(std::string(opt) + " is read without --prefix only (--prefix: the cost model alone)");
      mla::cli::require_with(app, ckpt_opt->count() == 0, {"--shape"}, "--prefix without a checkpoint",
                             " (a checkpoint gives the dims)");
    } else {
      mla::cli::require_with(app, opts.scan, {"--threads"}, "--scan");
    }
    if (opts.prefix > 0) {
      mla::model::PrefixShape shape =
          opts.shape == "deepseek-v3" ? mla::model::deepseek_v3_shape() : mla::model::kimi_k2_shape();
      if (ckpt_opt->count()) {
        const auto& cfg = mla::io::Checkpoint::open(opts.checkpoint).config();
        shape.heads = cfg.num_heads;
        shape.d_c = cfg.kv_lora_rank;
        shape.d_r = cfg.qk_rope_head_dim;
        shape.d_n = cfg.qk_nope_head_dim;
        shape.d_v = cfg.v_head_dim;
      }
      shape.s_q = opts.s_q;
      const double T = opts.gemm_tflops * 1e12, M = opts.bandwidth_gbs * 1e9;
      if (common.json_path != "-" && !common.quiet)
        std::cout << mla::model::prefix_cost_report(shape, opts.batch, opts.prefix, opts.own, T, M, false);
      mla::cli::write_json_output(common.json_path,
                                  mla::model::prefix_cost_report(shape, opts.batch, opts.prefix, opts.own, T, M, true));
      return 0;
    }
    if (!ckpt_opt->count()) throw mla::InputError("a checkpoint directory is required (or --prefix for the cost model)");
    const auto t0 = std::chrono::steady_clock::now();
    const auto ckpt = mla::io::Checkpoint::open(opts.checkpoint);
    const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("opened {} ({} files, headers + index + FP8 scale shapes validated) in {:.3f} s", opts.checkpoint,
                 ckpt.files().size(), open_s);
    const auto report = mla::io::inspect_checkpoint(ckpt);
    auto json = mla::io::inspect_to_json(report);
    json["open_seconds"] = open_s;
    if (opts.scan) {
      const auto scan = mla::io::scan_checkpoint(ckpt, opts.threads);
      spdlog::info("scanned {} tensors, {} bytes: all finite, scales > 0, in {:.3f} s ({:.2f} GB/s)", scan.tensors,
                   scan.bytes, scan.seconds, scan.bytes / scan.seconds / 1e9);
      json["scan"] = {{"tensors", scan.tensors}, {"bytes", scan.bytes}, {"seconds", scan.seconds}};
    }
    if (opts.fingerprint) json["fingerprint"] = mla::io::fingerprint(ckpt);
    if (common.json_path != "-" && !common.quiet) {
      std::cout << mla::io::inspect_to_table(report);
      if (opts.fingerprint) std::cout << "\nfingerprint " << json["fingerprint"].get<std::string>() << "\n";
    }
    mla::cli::write_json_output(common.json_path, json.dump(2));
    return 0;
  });
}
