// mla-bench --batch 128 --heads 16 --dc 512 --dr 64 --seqlen 4096 --page 64 [--kv fp8|fp4|codebook]
//           [--torch-baseline] [--json F]
#include "bench.hpp"
#include "prefix_bench.hpp"
#include "tp_bench.hpp"
#include "common/cli_common.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Times the paged MLA decode kernels (split-KV + combine, L2 flushed, median of runs) against the "
               "device's measured copy bandwidth and cuBLAS BF16 GEMM rate: the BF16 cache, or (--kv) an FP8 / 4-bit "
               "cache beside it; --tp several GPUs; --prefix shared-prefix decode"};
  mla::cli::CommonOptions common;
  mla::bench::Options o;
  app.add_option("--batch", o.batch, "Requests B")->check(CLI::Range(1, 65535));
  app.add_option("--heads", o.heads, "Query heads H (1..128)")->check(CLI::Range(1, 128));
  app.add_option("--dc", o.d_c, "Latent width d_c (32, 64, 128, 256, 512)");
  app.add_option("--dr", o.d_r, "RoPE width d_r (multiple of 16)");
  app.add_option("--seqlen", o.seqlen, "Cache length L per request")->check(CLI::Range(1, 1 << 24));
  app.add_option("--page", o.page, "Page size (64 or 128)");
  app.add_option("--sq", o.s_q, "Query tokens per request (1, or 2 for MTP)");
  app.add_option("--variant", o.variant, "Kernel variant: 0 = the default path for the shape (<= 16 rows: the memory-bound mma.sync + bulk-copy path; more rows: the wgmma paths, v7 for > 64 rows at d_c <= 256, else v6; the mma.sync 64-row path where neither fits), 7 = the mma.sync 64-row path on any > 16-row shape")->check(CLI::IsMember({0, 7}));
  app.add_flag("--sequential-pages", o.sequential_pages, "Pages in pool order (diagnostic) instead of a random permutation");
  app.add_flag("--varied", o.varied, "Lengths uniform in [L/2, 3L/2] instead of all L");
  app.add_option("--runs", o.runs, "Timed runs (median reported)")->check(CLI::Range(3, 100000));
  app.add_flag("!--no-ceilings", o.ceilings, "Skip the bandwidth / GEMM ceiling measurements");
  std::string kv = "bf16";
  CLI::Option* kv_opt = app.add_option("--kv", kv,
                 "Cache format: bf16 (default; the BF16 decode alone, with --variant and --torch-baseline), or fp8 / "
                 "fp4 / codebook: that format's decode beside the BF16 decode on the same tokens, lengths and page "
                 "table, every route the shape has (fp8: FP8 tensor cores; fp4: BF16 tensor cores and FP8 tensor "
                 "cores; codebook: BF16 tensor cores), each with its bytes-per-token floor at the measured copy rate "
                 "(docs/formats/kv-fp8.md, kv-fp4.md)")
      ->check(CLI::IsMember({"bf16", "fp8", "fp4", "codebook"}));
  app.add_flag("--torch-baseline", o.torch_baseline, "Also time the PyTorch einsum/softmax/einsum formulation");
  app.add_option("--python", o.python, "Python with PyTorch for --torch-baseline");
  mla::bench::TpOptions tpo;
  std::string tp_norm = "exact";
  CLI::Option* tp_opt = app.add_option("--tp", tpo.tp, "Several GPUs (NCCL): time one attention layer's decode step (q projection, decode, "
                                 "o_proj, all-reduce) per --mode on this many GPUs, DeepSeek-V3 shapes, --batch requests, "
                                 "each --seqlens; plus the KV capacity view")->check(CLI::Range(2, 8));
  app.add_option("--mode", tpo.modes,
                 "--tp: modes to time (repeatable): head-parallel, tpla (g = tp latent slices, all heads on every "
                 "GPU), tpla-g<g> (g slices shared by tp/g GPUs each, which split the heads; e.g. tpla-g2 at "
                 "--tp 4), dcp (default: head-parallel tpla dcp)");
  app.add_option("--seqlens", tpo.seqlens, "--tp: context lengths L (default 8192 32768)");
  app.add_option("--norm", tp_norm, "--tp: tpla's normalisation (exact adds the one-float-per-token all-reduce)")
      ->check(CLI::IsMember({"exact", "approx"}));
  app.add_option("--kv-budget-gib", tpo.kv_budget_gib, "--tp: per-GPU KV-cache budget of the capacity view");
  app.add_flag("--tp-one-gpu", tpo.one_gpu, "--tp on a one-GPU machine: time rank 0 of each mode alone (per-device work); "
                                            "the collectives' time is predicted, not measured");
  mla::bench::PrefixOptions po;
  bool prefix = false;
  CLI::Option* prefix_opt = app.add_flag("--prefix", prefix, "Shared-prefix (TyphoonMLA) decode: mixed (naive prefix + absorbed own pages + W_UV "
                                    "merge) vs absorb-only per --prefix-heads x --prefix-len x --prefix-batches, the "
                                    "measured crossover batch beside the cost model's B_theta (d_c 512, d_r 64, d_n = "
                                    "d_v = 128; --sq, --page, --runs apply)");
  app.add_option("--prefix-heads", po.heads, "--prefix: head counts (default 64 128)");
  app.add_option("--prefix-len", po.prefixes, "--prefix: shared prefix lengths (default 26472 4096)");
  app.add_option("--prefix-batches", po.batches, "--prefix: batches timed in full (default 64 128 256 512 1024)");
  app.add_option("--crossover-batches", po.crossover_batches, "--prefix: extra batches timed to locate the crossover");
  app.add_option("--suffix", po.suffix, "--prefix: own tokens per request (default 512)");
  // One mode a run: the cache formats are timed on one GPU's decode only.
  kv_opt->excludes(tp_opt)->excludes(prefix_opt);
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&] {
    // Each mode reads its own options; one given where its mode does not run is refused rather than
    // ignored (a timing that silently used other shapes than asked for would mislead).
    const auto given = [&](const char* name) { return app.count(name) > 0; };
    const bool tp_mode = given("--tp");
    if (prefix && tp_mode) throw mla::InputError("--prefix and --tp are two modes; give one");
    mla::cli::require_with(app, tp_mode, {"--mode", "--seqlens", "--norm", "--kv-budget-gib", "--tp-one-gpu"}, "--tp");
    mla::cli::require_with(app, prefix,
                           {"--prefix-heads", "--prefix-len", "--prefix-batches", "--crossover-batches", "--suffix"},
                           "--prefix");
    if (prefix || tp_mode) {
      // --prefix takes --sq, --page and --runs; --tp takes --batch, --page and --runs (DeepSeek-V3's shapes).
      const char* mode = prefix ? "--prefix" : "--tp";
      for (const char* opt : {"--heads", "--dc", "--dr", "--seqlen", "--variant", "--varied", "--sequential-pages",
                              "--torch-baseline", "--python"})
        if (given(opt)) throw mla::InputError(std::string(opt) + " is not read with " + mode + " (its shapes are " +
                                              (prefix ? "--prefix-heads / --prefix-len / --prefix-batches" : "DeepSeek-V3's at --seqlens") + ")");
      if (given("--no-ceilings"))
        throw mla::InputError(std::string("--no-ceilings is not read with ") + mode + " (it always measures the ceilings its figures are fractions of)");
      if (prefix && given("--batch")) throw mla::InputError("--batch is not read with --prefix (use --prefix-batches)");
      if (tp_mode && given("--sq")) throw mla::InputError("--sq is not read with --tp (its step decodes one token)");
    }
    mla::cli::require_with(app, o.torch_baseline, {"--python"}, "--torch-baseline");
    mla::cli::require_with(app, kv == "bf16", {"--variant"}, "--kv bf16",
                           " (--kv " + kv + " times every route the shape has)");
    if (prefix) {
      po.s_q = o.s_q;
      po.page = o.page;
      if (app.count("--runs")) po.runs = o.runs;
      mla::cli::write_json_output(common.json_path, mla::bench::run_prefix_bench(po));
      return 0;
    }
    if (app.count("--tp")) {
      tpo.batch = o.batch;
      tpo.page = o.page;
      if (app.count("--runs")) tpo.runs = o.runs;
      tpo.norm_exact = tp_norm == "exact";
      const std::string json = mla::bench::run_tp_bench(tpo);
      mla::cli::write_json_output(common.json_path, json);
      return 0;
    }
    if (kv != "bf16") {
      if (o.torch_baseline) throw mla::InputError("mla-bench --kv " + kv + ": --torch-baseline applies to --kv bf16 only");
      mla::cli::write_json_output(common.json_path, mla::bench::run_kv_bench(o, kv));
      return 0;
    }
    const std::string json = mla::bench::run_bench(o);
    mla::cli::write_json_output(common.json_path, json);
    return 0;
  });
}
