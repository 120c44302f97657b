// mla-inspect <checkpoint>: family, MLA dimensions, dtypes, parameter counts by part, KV cache
// bytes per token (BF16/FP8/FP4) and per device for head-parallel MLA vs TPLA tp=2,4,8.
// Opening the checkpoint validates every shard header, the index and the FP8 scale shapes.
#include <spdlog/spdlog.h>

#include <chrono>
#include <iostream>

#include "common/cli_common.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_scan.hpp"
#include "io/fingerprint.hpp"
#include "io/inspect.hpp"

namespace {
struct Options {
  std::string checkpoint;
  bool fingerprint = false;
  bool scan = false;
  int threads = 0;
};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Describe an MLA checkpoint (DeepSeek-V2/V3, Kimi-K2): dims, dtypes, parameters, KV cache sizes"};
  mla::cli::CommonOptions common;
  Options opts;
  app.add_option("checkpoint", opts.checkpoint, "Checkpoint directory (config.json + safetensors)")->required();
  app.add_flag("--fingerprint", opts.fingerprint,
               "Also print the attention fingerprint (SHA-256 over config + every layer's kv_a/kv_b/norm bytes)");
  app.add_flag("--scan", opts.scan,
               "Also read every byte and reject non-finite values and non-positive FP8 scales (cost: one pass over the files)");
  app.add_option("--threads", opts.threads, "Threads for --scan (0: all cores)");
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&] {
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
