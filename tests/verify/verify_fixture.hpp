#pragma once
// Shared set-up: converts the shipped trained tiny-v2 model and writes a small capture of
// random attention inputs (the per-layer check accepts any inputs; perplexity needs tokens).
#include <filesystem>
#include <random>
#include <string>

#include "common/scratch_dir.hpp"
#include "io/hdf5.hpp"
#include "transform/convert.hpp"
#include "verify/verify_decode.hpp"

namespace verify_test {
namespace fs = std::filesystem;

inline fs::path work_dir() { return mla::test::process_scratch_dir("mla_verify_test"); }

inline fs::path tiny_v2() { return fs::path(MLA_SOURCE_DIR) / "datasets/tiny-v2"; }

inline fs::path convert(const std::string& name, int tp, int g, mla::transform::Reparam reparam,
                        mla::transform::NormMode norm) {
  const fs::path out = work_dir() / name;
  if (fs::exists(out)) return out;
  mla::transform::ConvertOptions o;
  o.input = tiny_v2();
  o.output = out;
  o.tp = tp;
  o.groups = g;
  o.reparam = reparam;
  o.norm = norm;
  if (reparam == mla::transform::Reparam::Hadamard) o.seed = 3;
  mla::transform::convert_checkpoint(o);
  return out;
}

// /eval/layer_XX/hidden [S, T, D] ~ N(0, 1) and /eval/tokens [S, T] random bytes.
inline fs::path capture(int64_t layers, int64_t S, int64_t T, int64_t D) {
  const fs::path p = work_dir() / "capture.h5";
  if (fs::exists(p)) return p;
  auto f = mla::io::h5::File::create(p);
  f.root().set_attr("schema", "mla-capture/1");
  f.root().set_attr("model_type", "deepseek_v2");
  f.root().set_attr("num_layers", layers);
  f.root().set_attr("hidden_size", D);
  f.root().set_attr("source", "tests/verify: N(0,1) attention inputs, random bytes");
  f.root().set_attr("corpus_sha256", "none");
  std::mt19937_64 rng(11);
  std::normal_distribution<float> n;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<float> h(S * T * D);
    for (auto& x : h) x = n(rng);
    char name[64];
    std::snprintf(name, sizeof name, "eval/layer_%02lld/hidden", static_cast<long long>(l));
    f.root().write<float>(name, {uint64_t(S), uint64_t(T), uint64_t(D)}, h.data(), 1);
  }
  std::vector<int32_t> tok(S * T);
  for (auto& t : tok) t = static_cast<int32_t>(rng() % 256);
  f.root().write<int32_t>("eval/tokens", {uint64_t(S), uint64_t(T)}, tok.data());
  return p;
}

inline mla::verify::VerifyOptions options(const fs::path& converted) {
  mla::verify::VerifyOptions o;
  o.original = tiny_v2();
  o.converted = converted;
  o.activations = capture(6, 3, 40, 384);
  o.prefill = 24;
  o.decode = 8;
  o.sequences = 3;
  o.layers = {0, 5};
  return o;
}

}  // namespace verify_test
