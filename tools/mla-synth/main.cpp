// mla-synth: writes a synthetic MLA checkpoint (real tensor names and shapes, seeded random
// weights) for tests and benchmarks. See lib/io/synthetic.hpp for what is generated.
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

#include "common/cli_common.hpp"
#include "io/synthetic.hpp"

namespace {
struct Options {
  std::string out;
  std::string preset = "tiny-v3";
  std::string config;           // config.json to take the MLA config from instead of a preset
  int64_t layers = 0;           // 0: the preset's
  std::string dtype = "fp8";
  int64_t experts = 0;
  uint64_t seed = 0;
  double shard_mb = 5120;
  int threads = 0;
  bool overwrite = false;
};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a synthetic MLA checkpoint (seeded random weights with real shapes)"};
  mla::cli::CommonOptions common;
  Options o;
  std::string presets;
  for (const auto& n : mla::io::synthetic_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  app.add_option("out", o.out, "Output directory (written atomically)")->required();
  app.add_option("--preset", o.preset, "Shapes: " + presets)->capture_default_str();
  app.add_option("--config", o.config, "Take the MLA config from this config.json instead of a preset");
  app.add_option("--layers", o.layers, "Decoder layers to generate (0: the preset's; cost ~ linear)")->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", o.dtype, "Linear weights: fp8 (E4M3 + 128x128 scales) or bf16")
      ->check(CLI::IsMember({"fp8", "bf16"}))->capture_default_str();
  app.add_option("--experts", o.experts, "Routed experts per MoE layer to include (-1: all; each V3 expert is 44 MB in FP8)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Random seed (same seed: identical bytes)")->capture_default_str();
  app.add_option("--shard-mb", o.shard_mb, "Maximum shard size in MiB (tensor bytes)")->capture_default_str();
  app.add_option("--threads", o.threads, "Generator threads (0: all cores; the output does not depend on it)");
  app.add_flag("--overwrite", o.overwrite, "Replace an existing output directory");
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&] {
    mla::io::SyntheticOptions s;
    if (!o.config.empty()) {
      s.model.config = mla::model::load_mla_config(o.config);
      // Keep the file's other keys (router settings, architectures); MlaConfig keys are rewritten.
      std::ifstream in(o.config);
      s.model.extra = nlohmann::json::parse(in);
    } else {
      s.model = mla::io::synthetic_preset(o.preset);
    }
    if (o.layers > 0) {
      s.model.config.num_hidden_layers = o.layers;
      s.model.config.first_k_dense_replace = std::min(s.model.config.first_k_dense_replace, o.layers);
    }
    s.format = o.dtype == "bf16" ? mla::io::SyntheticFormat::BF16 : mla::io::SyntheticFormat::FP8;
    s.experts = o.experts;
    s.seed = o.seed;
    s.max_shard_bytes = static_cast<uint64_t>(o.shard_mb * 1024.0 * 1024.0);
    s.threads = o.threads;
    s.overwrite = o.overwrite;
    const auto r = mla::io::write_synthetic_checkpoint(s, o.out);
    spdlog::info("wrote {} ({} files, {} bytes, {} parameters) in {:.2f} s", o.out, r.shards.file_names.size(),
                 r.file_bytes, r.parameters, r.seconds);
    nlohmann::json j = {{"out", o.out}, {"files", r.shards.file_names.size()}, {"file_bytes", r.file_bytes},
                        {"parameters", r.parameters}, {"seconds", r.seconds}, {"seed", o.seed}};
    mla::cli::write_json_output(common.json_path, j.dump(2));
    return 0;
  });
}
