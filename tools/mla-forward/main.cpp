// mla-forward: the float64 dense forward of small dense MLA models (datasets/tiny-v*).
//   mla-forward perplexity <model> --text heldout.bin [--seq-len 256] [--max-windows N]
//       next-byte NLL over non-overlapping windows (each from position 0, predicting
//       positions 1..T-1): bits per byte and perplexity.
//   mla-forward capture <model> --out cap.h5 [--calib calib.bin --calib-seqs S]
//       [--eval heldout.bin --eval-seqs S] [--seq-len T] [--ref-seqs R --ref-len T]
//       writes the HDF5 capture schema (docs/formats/capture.md) from the C++ forward.
// Cost: ~15 MFLOP per token in float64 for the tiny models (about 1 s per 256-byte window
// per core on the 2-core CI machine); --threads spreads windows over cores.
#include <spdlog/spdlog.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "common/cli_common.hpp"
#include "io/byte_text.hpp"
#include "io/capture.hpp"
#include "io/checkpoint.hpp"
#include "io/fingerprint.hpp"
#include "io/mla_weights.hpp"

namespace {

struct PerplexityOptions {
  std::string model;
  std::string text;
  int64_t seq_len = 256;
  int64_t max_windows = 64;
  int threads = 1;
};

struct CaptureOptions {
  std::string model;
  std::string out;
  std::string calib, eval;
  int64_t calib_seqs = 0, eval_seqs = 0, seq_len = 256;
  int64_t ref_seqs = 0, ref_len = 64;
};

int run_perplexity(const PerplexityOptions& o, const mla::cli::CommonOptions& common) {
  const auto ckpt = mla::io::Checkpoint::open(o.model);
  const auto model = mla::io::load_dense_model(ckpt);
  const auto bytes = mla::io::read_bytes(o.text);
  const auto windows = mla::io::byte_windows(bytes, o.seq_len, o.max_windows);
  if (windows.empty())
    throw mla::InputError(o.text + ": " + std::to_string(bytes.size()) + " bytes, shorter than one window of " +
                          std::to_string(o.seq_len));
  spdlog::info("perplexity: {} windows of {} bytes from {} on {} thread(s)", windows.size(), o.seq_len, o.text,
               o.threads);
  const auto r = mla::model::evaluate_windows(model, windows, o.threads);
  nlohmann::json j = {{"model", o.model},           {"text", o.text},
                      {"text_sha256", mla::io::sha256_file(o.text)},
                      {"seq_len", o.seq_len},       {"windows", r.windows},
                      {"predicted_bytes", r.predicted}, {"bits_per_byte", r.bits_per_token()},
                      {"perplexity", r.perplexity()}};
  if (common.json_path != "-" && !common.quiet)
    std::cout << "bits_per_byte " << r.bits_per_token() << "  perplexity " << r.perplexity() << "  (" << r.windows
              << " windows x " << o.seq_len << ", " << r.predicted << " predicted bytes)\n";
  mla::cli::write_json_output(common.json_path, j.dump(2));
  return 0;
}

int run_capture(const CaptureOptions& o, const mla::cli::CommonOptions& common) {
  const auto ckpt = mla::io::Checkpoint::open(o.model);
  const auto model = mla::io::load_dense_model(ckpt);
  std::vector<mla::io::CaptureGroupSpec> groups;
  std::vector<std::string> sources;
  auto windows_of = [&](const std::string& path, int64_t count, int64_t len, const char* what) {
    if (path.empty()) throw mla::InputError(std::string("--") + what + " file is required for its sequences");
    const auto bytes = mla::io::read_bytes(path);
    auto w = mla::io::byte_windows(bytes, len, count);
    if (static_cast<int64_t>(w.size()) < count)
      throw mla::InputError(path + ": " + std::to_string(bytes.size()) + " bytes hold " + std::to_string(w.size()) +
                            " windows of " + std::to_string(len) + ", " + std::to_string(count) + " requested");
    if (std::find(sources.begin(), sources.end(), path) == sources.end()) sources.push_back(path);
    return w;
  };
  if (o.calib_seqs > 0) groups.push_back({"calib", windows_of(o.calib, o.calib_seqs, o.seq_len, "calib"), false});
  if (o.eval_seqs > 0) groups.push_back({"eval", windows_of(o.eval, o.eval_seqs, o.seq_len, "eval"), false});
  if (o.ref_seqs > 0) groups.push_back({"reference", windows_of(o.eval, o.ref_seqs, o.ref_len, "eval"), true});
  if (groups.empty()) throw mla::InputError("nothing to capture: set --calib-seqs, --eval-seqs or --ref-seqs");
  mla::io::CaptureMeta meta;
  meta.model_type = ckpt.config().model_type;
  meta.source = "mla-forward capture " MLA_VERSION_STRING " (C++ float64 dense forward, stored float32)";
  // Same rule as datasets/capture_activations.py: one source's SHA-256, or for several the
  // SHA-256 of their concatenated binary digests in first-use order.
  if (sources.size() == 1) {
    meta.corpus_sha256 = mla::io::sha256_file(sources[0]);
  } else {
    std::string tmp = o.out + ".digests.tmp";
    {
      std::ofstream d(tmp, std::ios::binary);
      for (const auto& s : sources) {
        const std::string hex = mla::io::sha256_file(s);
        for (size_t i = 0; i < hex.size(); i += 2) d.put(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      }
    }
    meta.corpus_sha256 = mla::io::sha256_file(tmp);
    std::filesystem::remove(tmp);
  }
  meta.checkpoint_fingerprint = mla::io::fingerprint(ckpt);
  mla::io::write_dense_capture(model, meta, groups, o.out, [](const std::string& g, int64_t done, int64_t total) {
    if (done == total || done % 16 == 0) spdlog::info("capture: /{} {}/{} sequences", g, done, total);
  });
  nlohmann::json j = {{"out", o.out}, {"model", o.model}, {"checkpoint_fingerprint", meta.checkpoint_fingerprint}};
  if (common.json_path != "-" && !common.quiet) std::cout << "wrote " << o.out << "\n";
  mla::cli::write_json_output(common.json_path, j.dump(2));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Float64 dense forward of small dense MLA models: held-out perplexity and HDF5 activation captures"};
  mla::cli::CommonOptions common;
  app.require_subcommand(1);
  app.fallthrough();  // -q, --json, ... may follow the subcommand
  PerplexityOptions p;
  auto* ppl = app.add_subcommand("perplexity", "Bits per byte over non-overlapping windows of a byte file");
  ppl->add_option("model", p.model, "Checkpoint directory (e.g. datasets/tiny-v3)")->required();
  ppl->add_option("--text", p.text, "Byte file (e.g. datasets/corpus/heldout.bin)")->required();
  ppl->add_option("--seq-len", p.seq_len, "Window length in bytes")->check(CLI::Range(2, 1 << 20));
  ppl->add_option("--max-windows", p.max_windows, "At most this many windows (0: all; ~1 s each per thread)");
  ppl->add_option("--threads", p.threads, "Worker threads")->check(CLI::Range(1, 256));
  CaptureOptions c;
  auto* cap = app.add_subcommand("capture", "Write the mla-capture/1 HDF5 schema from the C++ forward");
  cap->add_option("model", c.model, "Checkpoint directory")->required();
  cap->add_option("--out", c.out, "Output .h5 (temp file + rename)")->required();
  cap->add_option("--calib", c.calib, "Byte file of /calib");
  cap->add_option("--calib-seqs", c.calib_seqs, "Sequences in /calib (x seq-len x D x layers x 4 bytes)");
  cap->add_option("--eval", c.eval, "Byte file of /eval and /reference");
  cap->add_option("--eval-seqs", c.eval_seqs, "Sequences in /eval");
  cap->add_option("--seq-len", c.seq_len, "T of /calib and /eval")->check(CLI::Range(2, 1 << 20));
  cap->add_option("--ref-seqs", c.ref_seqs, "Sequences in /reference (attn_out + logits too)");
  cap->add_option("--ref-len", c.ref_len, "T of /reference")->check(CLI::Range(2, 1 << 20));
  mla::cli::add_common_options(app, common);
  return mla::cli::run_tool(app, common, argc, argv, [&] {
    if (ppl->parsed()) return run_perplexity(p, common);
    // Options that qualify another one: refused without it, so that no setting is silently ignored.
    for (const auto& [name, n] : {std::pair{"--calib-seqs", c.calib_seqs}, std::pair{"--eval-seqs", c.eval_seqs},
                                  std::pair{"--ref-seqs", c.ref_seqs}})
      if (n < 0) throw mla::InputError(std::string(name) + " must be >= 0 (got " + std::to_string(n) + ")");
    mla::cli::require_with(*cap, c.calib_seqs > 0, {"--calib"}, "--calib-seqs N");
    mla::cli::require_with(*cap, c.eval_seqs > 0 || c.ref_seqs > 0, {"--eval"}, "--eval-seqs N or --ref-seqs N");
    mla::cli::require_with(*cap, c.calib_seqs > 0 || c.eval_seqs > 0, {"--seq-len"}, "--calib-seqs N or --eval-seqs N",
                           " (--ref-len: /reference)");
    mla::cli::require_with(*cap, c.ref_seqs > 0, {"--ref-len"}, "--ref-seqs N");
    return run_capture(c, common);
  });
}
