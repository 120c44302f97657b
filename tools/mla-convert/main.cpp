// mla-convert: an MLA checkpoint -> TPLA per-rank checkpoints (SPEC section 2).
// Thin main: options into ConvertOptions, one library call, report.
#include <iostream>

#include "common/cli_common.hpp"
#include "core/error.hpp"
#include "transform/convert.hpp"
#include "transform/kv4_params.hpp"

int main(int argc, char** argv) {
  using namespace mla::transform;
  CLI::App app{"Reparameterise an MLA checkpoint (absorb gamma, rotate the latent) and shard it for "
               "tensor-parallel latent attention (TPLA): one HF checkpoint per rank + manifest.json"};
  mla::cli::CommonOptions common;
  mla::cli::add_common_options(app, common);
  ConvertOptions o;
  std::string reparam = "identity", norm = "approx", out_dtype = "bf16", input, output;
  uint64_t seed = 0;
  bool list = false, profile = false;
  app.add_option("CHECKPOINT", input, "Input Hugging Face checkpoint directory")->required();
  app.add_option("-o,--output", output, "Output directory (must not exist; written atomically)")->required();
  app.add_option("--tp", o.tp, "Tensor-parallel degree: 1, 2, 4 or 8")->required();
  app.add_option("--groups", o.groups, "Latent groups g (divides tp; default g = tp: each rank caches d_c/tp)");
  app.add_option("--reparam", reparam, "Rotation U: identity | hadamard (d_c a power of two) | hadamard-block (block-diagonal Hadamard, any d_c) | pca (needs --calib) | qk (the query-and-key "
                 "basis of docs/math.md; needs --calib)")
      ->check(CLI::IsMember({"identity", "hadamard", "hadamard-block", "pca", "qk"}));
  app.add_option("--calib", o.calib, "calib.h5 from mla-calibrate: PCA basis, energy fractions f_k, mu_k");
  app.add_option("--norm", norm, "Sliced kv_a RMSNorm: approx (sqrt(g f_k) folded) | exact (engine all-reduces)")
      ->check(CLI::IsMember({"approx", "exact"}));
  app.add_option("--out-dtype", out_dtype, "bf16 | fp8 (E4M3, fresh 128x128 block scales for *_proj weights)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--kv-cache,--kv", o.kv_cache,
                 "KV-cache format to record for serving: bf16; fp8 (docs/formats/kv-fp8.md: each rank's config.json "
                 "gets a kv_cache section and an hf_quant_config.json with kv_cache_quant_algo FP8); fp4 or codebook "
                 "(docs/formats/kv-fp4.md: needs --calib; a Walsh-Hadamard rotation inside each rank's latent slice is "
                 "folded into kv_a_proj_with_mqa / kv_b_proj after the --reparam basis, and the per-layer c or codebook, "
                 "the rotation and the protected layers are recorded)")
      ->check(CLI::IsMember({"bf16", "fp8", "fp4", "codebook"}))
      ->capture_default_str();
  app.add_option("--kv-rotation", o.kv_rotation,
                 "With --kv-cache fp4|codebook: hadamard (default) or none (no extra rotation: the study's alternative)")
      ->check(CLI::IsMember({"hadamard", "none"}))
      ->capture_default_str();
  app.add_flag("--absorb", o.absorb, "Also write per-head W_UK [H, d_n, d_c/g] and W_UV [H, d_v, d_c/g] (BF16)");
  app.add_flag("--dry-run", o.dry_run, "Print the per-rank plan and KV bytes per token per device; write nothing");
  app.add_flag("--list-tensors", list, "List every output tensor of every rank in the plan (with --dry-run, or "
               "after the conversion without -q)");
  app.add_option("--threads", o.threads, "Worker threads (output bytes do not depend on it)")->check(CLI::Range(1, 256));
  auto* seed_opt = app.add_option("--seed", seed,
                                  "Seed of the Hadamard random +-1 diagonal (none: plain Sylvester); with --reparam "
                                  "hadamard|hadamard-block or --kv fp4|codebook (--kv-rotation hadamard)");
  app.add_option("--max-shard-bytes", o.max_shard_bytes, "Largest output shard (tensor bytes)");
  app.add_flag("--profile", profile,
               "Print where the time went: per phase (read, dequantise, float64 math, cast/quantise, write, "
               "SHA-256, fsync) thread-seconds, bytes and one core's rate (also under \"profile\" in --json)");

  return mla::cli::run_tool(app, common, argc, argv, [&] {
    // Options that qualify another one: refused without it, so that no setting is silently ignored.
    const bool kv4 = is_kv4_format(o.kv_cache);
    mla::cli::require_with(app, kv4, {"--kv-rotation"}, "--kv fp4 or codebook", " (got --kv " + o.kv_cache + ")");
    const bool hadamard = reparam == "hadamard" || reparam == "hadamard-block" || (kv4 && o.kv_rotation == "hadamard");
    mla::cli::require_with(app, hadamard, {"--seed"},
                           "--reparam hadamard|hadamard-block or --kv fp4|codebook with --kv-rotation hadamard",
                           " (got --reparam " + reparam + ", --kv " + o.kv_cache +
                               (kv4 ? ", --kv-rotation " + o.kv_rotation : std::string()) + ")");
    if (list && common.quiet && !o.dry_run)
      throw mla::InputError("--list-tensors is read with --dry-run, or without -q (-q prints no plan)");
    o.input = input;
    o.output = output;
    o.reparam = parse_reparam(reparam);
    o.norm = parse_norm_mode(norm);
    o.out_dtype = parse_out_dtype(out_dtype);
    if (seed_opt->count() > 0) o.seed = seed;
    const ConvertResult r = convert_checkpoint(o);
    if (o.dry_run || !common.quiet) std::cout << describe_plan(r, list);
    if (profile) std::cout << describe_profile(r);
    mla::cli::write_json_output(common.json_path, result_json(r).dump(2));
    return 0;
  });
}
