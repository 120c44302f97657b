// mla-bench --batch 128 --heads 16 --dc 512 --dr 64 --seqlen 4096 --page 64 [--torch-baseline] [--json F]
#include "bench.hpp"
#include "common/cli_common.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Times the BF16 paged MLA decode kernel (split-KV + combine, L2 flushed, median of runs) "
               "against the device's measured copy bandwidth and cuBLAS BF16 GEMM rate"};
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
  app.add_flag("--torch-baseline", o.torch_baseline, "Also time the PyTorch einsum/softmax/einsum formulation");
  app.add_option("--python", o.python, "Python with PyTorch for --torch-baseline");
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&] {
    const std::string json = mla::bench::run_bench(o);
    mla::cli::write_json_output(common.json_path, json);
    return 0;
  });
}
