// verify-decode: a converted (TPLA) checkpoint's decode, through the GPU kernels or their CPU
// twins, against the original model in float64 — per layer, and end to end (--perplexity).
// Exit codes: 0 within thresholds, 2 verification failed, 1 runtime error.
#include <spdlog/spdlog.h>

#include <iostream>
#include <sstream>

#include "common/cli_common.hpp"
#include "core/error.hpp"
#include "verify/shared_prefix_verify.hpp"
#include "verify/fp8_backend.hpp"
#include "verify/kv4_backend.hpp"
#include "verify/verify_decode.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "verify-decode: prefill P tokens with exact MLA, decode T tokens through the converted checkpoint's TPLA\n"
      "ranks (decode kernel on --device cuda, its CPU twin on --device cpu), and compare every decoded token's\n"
      "attention output with the ORIGINAL model computed in float64. Prints a per-layer table: converted vs\n"
      "original (rel_l2, 1-cos, rmse, worst sequence/position), the float64 converted path vs original (the\n"
      "conversion's own error) and kernel vs float64 path (the kernel's error). Checks the manifest's SHA-256\n"
      "and the original's fingerprint first."};
  mla::cli::CommonOptions common;
  mla::verify::VerifyOptions o;
  std::string layers;
  app.add_option("--original", o.original, "Original HF checkpoint directory")->required()->check(CLI::ExistingDirectory);
  app.add_option("--converted", o.converted, "mla-convert output directory")->required()->check(CLI::ExistingDirectory);
  app.add_option("--activations", o.activations, "Capture HDF5 (docs/formats/capture.md)")->required()->check(CLI::ExistingFile);
  app.add_option("--group", o.capture_group, "Capture group to read sequences from")->capture_default_str();
  app.add_option("--prefill", o.prefill, "P: prompt tokens prefilled with exact MLA")->capture_default_str();
  app.add_option("--decode", o.decode, "T: tokens decoded one at a time through TPLA")->capture_default_str();
  app.add_option("--sequences", o.sequences, "Batch: captured sequences decoded together")->capture_default_str();
  app.add_option("--layers", layers, "Comma-separated layer indices (default: all)");
  app.add_option("--device", o.device, "cuda (kernels) or cpu (CPU twins)")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  bool no_kernel = false;
  app.add_flag("--no-kernel", no_kernel,
               "Per-layer figures from the float64 converted path only: no decode kernel or CPU twin runs (for TPLA "
               "slices no kernel supports, e.g. d_c/g = 16 on the tiny models at tp 8; the kernel columns then "
               "repeat the float64 path). Not with --devices, --kv other than bf16, --perplexity-path kernel or "
               "--shared-prefix");
  app.add_option("--devices", o.devices,
                 "Also run every TPLA rank on its own device (rank r on GPU r through NCCL with --device cuda; on "
                 "thread r with the in-process stand-in with --device cpu); must equal the checkpoint's ranks. Each "
                 "rank holds its slice in its own cache of the --kv format. Its output must equal the one-device "
                 "sequential sum (relative L2 <= 1e-13) and is then reported")
      ->check(CLI::Range(1, 64));
  app.add_option("--comm", o.comm,
                 "With --devices: nccl (rank r on GPU r; the default with --device cuda) or threads (in-process sums; "
                 "with --device cuda rank r runs on GPU r mod the GPUs present, so one GPU runs every rank)")
      ->check(CLI::IsMember({"auto", "nccl", "threads"}))->capture_default_str();
  app.add_flag("--dcp", o.dcp,
               "With --devices N and a tp = 1 conversion: decode context parallelism instead (token t on rank t mod N, "
               "full latent, all heads; partial outputs merged by log-sum-exp across devices; the bf16 cache only); "
               "must equal the one-device decode within --kernel-rel-l2");
  app.add_option("--page-size", o.page_size, "KV cache page size (64 or 128)")->capture_default_str();
  app.add_option("--kv", o.kv,
                 "KV-cache format: bf16; fp8 (paged E4M3, 644 B/token at d_c = 512: FP8 kernels on cuda, their twins on "
                 "cpu; thresholds at least 0.08 rel_l2 / 3.2e-3 1-cos); fp8-rope-aware, fp8-A .. fp8-D (SnapMLA study "
                 "configurations: the cache quantised-dequantised, BF16 decode twin, cpu only); fp4 (E2M1 + UE8M0 per 32, 400 "
                 "B/token) and codebook (16-level Lloyd-Max per layer + per-token scale, 388 B/token): the 4-bit append "
                 "kernel on cuda, the append twin on cpu, then the --kv4-route decode (docs/formats/kv-fp4.md); "
                 "protected layers keep a BF16 cache; parameters from --calib or from a --kv fp4|codebook "
                 "conversion's config.json; thresholds at least 0.25 rel_l2 / 0.032 1-cos (0.27 / 0.037 on the fp8 "
                 "route)")
      ->check(CLI::IsMember(mla::verify::kv_format_names()))
      ->capture_default_str();
  app.add_option("--kv4-route", o.kv4_route,
                 "With --kv fp4|codebook, how the 4-bit pages are decoded: bf16 (the default) dequantises them to BF16 "
                 "and runs the BF16 decode (cuda: the 4-bit decode kernel, 0.7x FlashMLA's BF16 decode at 16 heads, "
                 "0.14x at 128 on an H200; cpu: BF16 dequantisation + BF16 decode twin); fp8 (fp4 only) converts them "
                 "to the FP8 cache format per tile and decodes on FP8 tensor cores with the query quantised to E4M3 "
                 "(cuda: fp8_decode_fp4_cache_bf16q, 1.2x FlashMLA BF16 at 16 heads, 0.75x at 128; cpu: "
                 "fp4_cache_to_fp8 + the FP8 decode twin, the kernel's twin to its own tolerance). fp8 adds the FP8 "
                 "decode's query and P rounding to the 4-bit grid's error (~1% more rel_l2 on the tiny models) and "
                 "takes d_c 128/256/512, d_r 32/64, <= 64 heads at d_c <= 256 (other shapes refused)")
      ->check(CLI::IsMember(mla::verify::kv4_route_names()))
      ->capture_default_str();
  app.add_option("--calib", o.calib, "With --kv fp4|codebook: mla-calibrate's calib.h5 (per-layer c, codebooks, "
                 "protected layers); without it, the parameters a --kv fp4|codebook conversion recorded")->check(CLI::ExistingFile);
  app.add_option("--fp4-rule", o.fp4_rule, "With --kv fp4: UE8M0 exponent rule round (E = round(log2(c amax))), "
                 "ocp_floor (OCP MX) or rceil")->check(CLI::IsMember({"round", "ocp_floor", "rceil"}))->capture_default_str();
  float fp4_c = 0.f;
  app.add_option("--fp4-c", fp4_c, "With --kv fp4 and the round rule: this c for every layer instead of the fitted "
                 "per-layer c_rounded (UltraQuant's published constant: 0.156)")->check(CLI::PositiveNumber);
  app.add_flag("!--no-protect", o.kv4_protect, "With --kv fp4|codebook: quantise calib.h5's protected layers too "
               "(default: they keep a BF16 cache)");
  app.add_option("--seed", o.seed, "Seed of the random page placement")->capture_default_str();
  app.add_option("--max-rel-l2", o.max_rel_l2, "Fail when converted-vs-original relative L2 exceeds this")->capture_default_str();
  app.add_option("--max-cos-diff", o.max_cos_diff, "Fail when converted-vs-original 1-cos exceeds this")->capture_default_str();
  app.add_option("--kernel-rel-l2", o.kernel_rel_l2, "Fail when kernel-vs-float64-path relative L2 exceeds this")->capture_default_str();
  app.add_flag("--perplexity", o.perplexity,
               "Also run end to end (dense models): the same tokens scored by original and converted, per-token loss "
               "differences, their paired 95% interval (Student t over windows) and top-1 agreement");
  app.add_option("--perplexity-windows", o.perplexity_windows,
                 "End-to-end windows of prefill + decode tokens (default: --sequences from the capture, 512 "
                 "with --perplexity-text)")->check(CLI::NonNegativeNumber);
  app.add_option("--perplexity-text", o.perplexity_text,
                 "Byte file to take the end-to-end windows from, spread evenly (default: the capture group)")
      ->check(CLI::ExistingFile);
  app.add_option("--perplexity-path", o.perplexity_path,
                 "End-to-end TPLA path: f64 (float64, all positions at once; the conversion's own effect) or kernel "
                 "(decode kernels / CPU twins token by token, bf16 cache)")
      ->check(CLI::IsMember({"f64", "kernel"}))->capture_default_str();
  app.add_option("--threads", o.threads, "End-to-end worker threads on the CPU (0: all cores)")->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-pd-separation", o.pd_separation,
               "Prompt tokens also go through TPLA (default: PD separation, prefill exact)");
  app.add_option("--confidence", o.confidence, "Confidence level of the end-to-end interval")
      ->check(CLI::Range(0.5, 0.9999))->capture_default_str();
  std::string max_loss;
  app.add_option("--max-loss-increase", max_loss,
                 "With --perplexity: exit 2 unless the interval's upper end is at or below this increase, in bits "
                 "per token (0.01) or percent of the original loss (0.5%)");
  int64_t shared_prefix = 0;
  app.add_option("--shared-prefix", shared_prefix,
                 "N: make the first N tokens of every sequence identical and decode through the mixed (TyphoonMLA) "
                 "path: naive attention over the decompressed shared prefix + absorbed kernel over each sequence's "
                 "own pages + LSE merge; errors vs the float64 original as above (tp = 1 conversions; N <= --prefill; "
                 "the bf16 cache on one device: not with --kv other than bf16, --devices, --dcp, --perplexity, "
                 "--no-pd-separation or --no-kernel)");
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&] {
    if (!layers.empty()) {
      std::stringstream ss(layers);
      std::string item;
      while (std::getline(ss, item, ',')) {
        try {
          o.layers.push_back(std::stoll(item));
        } catch (const std::exception&) {
          throw mla::InputError("--layers: '" + item + "' is not an integer");
        }
      }
    }
    if (!max_loss.empty()) o.max_loss_increase = mla::verify::LossThreshold::parse(max_loss);
    // Options that qualify another one are refused without it, so that no setting is silently
    // ignored (--calib: by the library, verify_decode and verify_shared_prefix).
    const std::string got = " (got --kv " + o.kv + ")";
    mla::cli::require_with(app, o.kv == "fp4", {"--fp4-rule", "--fp4-c"}, "--kv fp4", got);
    mla::cli::require_with(app, o.kv == "fp4" || o.kv == "codebook", {"--no-protect"}, "--kv fp4 or codebook", got);
    if (app.count("--kv4-route") > 0 && o.kv != "fp4" && o.kv != "codebook")  // given as the default bf16 too
      throw mla::InputError("--kv4-route " + o.kv4_route + " is read with --kv fp4" +
                            (o.kv4_route == "fp8" ? "" : " or codebook") + " only" + got);
    mla::cli::require_with(app, o.devices > 0, {"--comm"}, "--devices N");
    mla::cli::require_with(app, o.perplexity,
                           {"--perplexity-windows", "--perplexity-text", "--perplexity-path", "--threads",
                            "--confidence", "--max-loss-increase"},
                           "--perplexity");
    o.kernel = !no_kernel;
    if (fp4_c > 0.f) o.fp4_c = fp4_c;
    if (no_kernel && shared_prefix > 0) throw mla::InputError("--no-kernel cannot be combined with --shared-prefix");
    if (shared_prefix > 0) {
      const auto sp = mla::verify::verify_shared_prefix(o, shared_prefix);
      std::cout << sp.table(o);
      mla::cli::write_json_output(common.json_path, sp.to_json(o).dump(2));
      return sp.pass ? 0 : 2;
    }
    const auto rep = mla::verify::verify_decode(o);
    std::cout << rep.table(o);
    mla::cli::write_json_output(common.json_path, rep.to_json(o).dump(2));
    return rep.pass ? 0 : 2;
  });
}
