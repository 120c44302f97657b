// Checkpoint directories: index resolution (scale in another shard), strict errors (missing
// shard, wrong scale shape, unmapped tensor, FP8 without scale), synthetic generator
// reproducibility, fingerprint and sha256_file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_scan.hpp"
#include "io/fingerprint.hpp"
#include "io/mla_weights.hpp"
#include "io/safetensors.hpp"
#include "io/synthetic.hpp"

using namespace mla;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("mla-ckpt-" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

void write_tiny_config(const fs::path& dir) {
  auto p = io::synthetic_preset("tiny-v3");
  write_text(dir / "config.json", io::mla_config_to_json(p.config).dump(2));
}

OwnedTensor f32(const std::string& name, Shape shape, float value) {
  const auto n = static_cast<size_t>(shape_numel(shape));
  std::vector<float> v(n, value);
  OwnedTensor t{name, DType::F32, std::move(shape), std::vector<std::byte>(n * 4)};
  std::memcpy(t.bytes.data(), v.data(), n * 4);
  return t;
}

// A 576 x 256 FP8 weight (V3's kv_a_proj_with_mqa row count at a small width) with all codes
// 1.0 and its [5, 2] scales 1..10, split over two shards with an index.
const std::string kW = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight";
fs::path make_two_shard_checkpoint(const std::string& name, Shape scale_shape = {5, 2}) {
  const fs::path dir = fresh_dir(name);
  write_tiny_config(dir);
  OwnedTensor w{kW, DType::F8_E4M3, {576, 256}, std::vector<std::byte>(576 * 256, std::byte{0x38})};
  OwnedTensor s{kW + "_scale_inv", DType::F32, scale_shape, {}};
  std::vector<float> sv(static_cast<size_t>(shape_numel(scale_shape)));
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = static_cast<float>(i + 1);
  s.bytes.resize(sv.size() * 4);
  std::memcpy(s.bytes.data(), sv.data(), s.bytes.size());
  io::write_safetensors(dir / "model-00001-of-00002.safetensors", {w}, {});
  io::write_safetensors(dir / "model-00002-of-00002.safetensors", {s, f32("model.norm.weight", {8}, 1.0f)}, {});
  nlohmann::json idx = {{"metadata", {{"total_size", 0}}},
                        {"weight_map", {{kW, "model-00001-of-00002.safetensors"},
                                        {kW + "_scale_inv", "model-00002-of-00002.safetensors"},
                                        {"model.norm.weight", "model-00002-of-00002.safetensors"}}}};
  write_text(dir / "model.safetensors.index.json", idx.dump(2));
  return dir;
}

void expect_open_error(const fs::path& dir, std::initializer_list<std::string> fragments) {
  try {
    io::Checkpoint::open(dir);
    FAIL() << "opened " << dir;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

io::SyntheticOptions tiny_options(const std::string& preset, uint64_t seed) {
  io::SyntheticOptions o;
  o.model = io::synthetic_preset(preset);
  o.experts = -1;
  o.seed = seed;
  o.max_shard_bytes = 200 * 1024;  // forces several shards
  o.threads = 2;
  return o;
}

}  // namespace

TEST(Checkpoint, ScaleInAnotherShardDequantisesThroughWeightMap) {
  const auto ckpt = io::Checkpoint::open(make_two_shard_checkpoint("two-shard"));
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.file_of(kW).filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt.file_of(kW + "_scale_inv").filename(), "model-00002-of-00002.safetensors");
  const MatrixR m = ckpt.load_matrix(kW);
  ASSERT_EQ(m.rows(), 576);
  ASSERT_EQ(m.cols(), 256);
  // scale (bi, bj) = 1 + 2*bi + bj; the last row block is the 64-row partial edge.
  EXPECT_EQ(m(0, 0), 1.0);
  EXPECT_EQ(m(0, 255), 2.0);
  EXPECT_EQ(m(128, 0), 3.0);
  EXPECT_EQ(m(575, 0), 9.0);
  EXPECT_EQ(m(575, 255), 10.0);
  EXPECT_EQ(ckpt.load_matrix("model.norm.weight").rows(), 1);
  EXPECT_THROW(ckpt.raw("model.layers.9.nothing"), InputError);
}

TEST(Checkpoint, MissingShardIsNamed) {
  const fs::path dir = make_two_shard_checkpoint("missing-shard");
  fs::remove(dir / "model-00002-of-00002.safetensors");
  expect_open_error(dir, {"model-00002-of-00002.safetensors", "missing", "model.safetensors.index.json"});
}

TEST(Checkpoint, WrongScaleShapeIsNamed) {
  expect_open_error(make_two_shard_checkpoint("bad-scale", {4, 2}),
                    {kW + "_scale_inv", "[4, 2]", "[5, 2]", "model-00002-of-00002.safetensors"});
}

TEST(Checkpoint, UnmappedTensorAndBadIndexAreRejected) {
  fs::path dir = make_two_shard_checkpoint("unmapped");
  auto idx = nlohmann::json::parse(slurp(dir / "model.safetensors.index.json"));
  idx["weight_map"].erase("model.norm.weight");
  write_text(dir / "model.safetensors.index.json", idx.dump());
  expect_open_error(dir, {"model.norm.weight", "not mapped"});

  idx["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";  // wrong shard
  write_text(dir / "model.safetensors.index.json", idx.dump());
  expect_open_error(dir, {"model.norm.weight", "model-00001-of-00002.safetensors", "no such tensor"});

  idx["weight_map"]["model.norm.weight"] = "../escape.safetensors";
  write_text(dir / "model.safetensors.index.json", idx.dump());
  expect_open_error(dir, {"../escape.safetensors"});

  write_text(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_open_error(dir, {"weight_map"});
}

TEST(Checkpoint, Fp8WithoutScaleAndMissingConfig) {
  fs::path dir = fresh_dir("no-scale");
  write_tiny_config(dir);
  OwnedTensor w{"x.weight", DType::F8_E4M3, {4, 4}, std::vector<std::byte>(16, std::byte{0x38})};
  io::write_safetensors(dir / "model.safetensors", {w}, {});
  expect_open_error(dir, {"x.weight", "x.weight_scale_inv"});
  fs::remove(dir / "config.json");
  expect_open_error(dir, {"config.json", "missing"});
  expect_open_error(dir / "nope", {"nope"});
}

TEST(Synthetic, SameSeedSameBytesAnyThreadCount) {
  auto a = tiny_options("tiny-v3", 7);
  auto b = a;
  b.threads = 3;
  const fs::path da = fresh_dir("syn-a") / "ckpt", db = fresh_dir("syn-b") / "ckpt", dc = fresh_dir("syn-c") / "ckpt";
  const auto ra = io::write_synthetic_checkpoint(a, da);
  io::write_synthetic_checkpoint(b, db);
  ASSERT_GT(ra.shards.file_names.size(), 1u);
  ASSERT_TRUE(fs::exists(da / "model.safetensors.index.json"));
  for (const auto& e : fs::directory_iterator(da))
    EXPECT_EQ(slurp(e.path()), slurp(db / e.path().filename())) << e.path().filename();
  auto c = a;
  c.seed = 8;
  io::write_synthetic_checkpoint(c, dc);
  EXPECT_NE(slurp(da / ra.shards.file_names[0]), slurp(dc / ra.shards.file_names[0]));
  // Writing over an existing directory needs overwrite.
  EXPECT_THROW(io::write_synthetic_checkpoint(a, da), Error);
}

TEST(Synthetic, OpensWithRealShapesAndSensibleValues) {
  const fs::path dir = fresh_dir("syn-open") / "ckpt";
  io::write_synthetic_checkpoint(tiny_options("tiny-v3", 1), dir);
  const auto ckpt = io::Checkpoint::open(dir);
  const auto& c = ckpt.config();
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  const MatrixR kva = ckpt.load_matrix("model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_EQ(kva.rows(), c.kv_lora_rank + c.qk_rope_head_dim);  // 160: a partial edge block
  ASSERT_EQ(kva.cols(), c.hidden_size);
  const double rms = std::sqrt(kva.squaredNorm() / static_cast<double>(kva.size()));
  EXPECT_NEAR(rms, 1.0 / std::sqrt(static_cast<double>(c.hidden_size)), 0.1 / std::sqrt(static_cast<double>(c.hidden_size)));
  const MatrixR gamma = ckpt.load_matrix("model.layers.0.self_attn.kv_a_layernorm.weight");
  EXPECT_NEAR(gamma.mean(), 1.0, 0.05);
  EXPECT_GT(gamma.minCoeff(), 0.0);
  // MoE layer 1 of tiny-v3 holds all 4 experts, the router and its bias.
  EXPECT_TRUE(ckpt.has("model.layers.1.mlp.experts.3.down_proj.weight"));
  EXPECT_TRUE(ckpt.has("model.layers.1.mlp.gate.e_score_correction_bias"));
  EXPECT_TRUE(ckpt.has("model.layers.0.mlp.gate_proj.weight"));
}

TEST(Fingerprint, StableAndSensitive) {
  const fs::path d1 = fresh_dir("fp-1") / "ckpt", d2 = fresh_dir("fp-2") / "ckpt", d3 = fresh_dir("fp-3") / "ckpt";
  io::write_synthetic_checkpoint(tiny_options("tiny-v2", 3), d1);
  io::write_synthetic_checkpoint(tiny_options("tiny-v2", 3), d2);
  io::write_synthetic_checkpoint(tiny_options("tiny-v2", 4), d3);
  const std::string f1 = io::fingerprint(io::Checkpoint::open(d1));
  EXPECT_EQ(f1.size(), 64u);
  EXPECT_EQ(f1, io::fingerprint(io::Checkpoint::open(d2)));
  EXPECT_NE(f1, io::fingerprint(io::Checkpoint::open(d3)));
  // Same weights, a different attention config field -> different fingerprint.
  auto cfg = nlohmann::json::parse(slurp(d2 / "config.json"));
  cfg["rope_theta"] = 20000.0;
  write_text(d2 / "config.json", cfg.dump());
  EXPECT_NE(f1, io::fingerprint(io::Checkpoint::open(d2)));
}

TEST(Fingerprint, Sha256File) {
  const fs::path p = fresh_dir("sha") / "abc.txt";
  write_text(p, "abc");
  // FIPS 180-2 test vector.
  EXPECT_EQ(io::sha256_file(p), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_THROW(io::sha256_file(p.parent_path() / "missing"), Error);
}

TEST(Scan, RejectsNonFiniteValuesAndBadScales) {
  // A clean checkpoint scans; a NaN BF16 element and a zero FP8 scale are each named.
  const fs::path dir = make_two_shard_checkpoint("scan-ok");
  const auto ok = io::scan_checkpoint(io::Checkpoint::open(dir), 2);
  EXPECT_EQ(ok.tensors, 3);
  EXPECT_EQ(ok.bytes, 576 * 256 + 10 * 4 + 8 * 4);

  fs::path bad = make_two_shard_checkpoint("scan-zero-scale");
  {
    OwnedTensor s = f32(kW + "_scale_inv", {5, 2}, 1.0f);
    const float zero = 0.0f;
    std::memcpy(s.bytes.data() + 7 * 4, &zero, 4);
    io::write_safetensors(bad / "model-00002-of-00002.safetensors", {s, f32("model.norm.weight", {8}, 1.0f)}, {});
  }
  try {
    io::scan_checkpoint(io::Checkpoint::open(bad), 2);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(kW + "_scale_inv' element 7"), std::string::npos) << e.what();
  }

  fs::path nan_dir = fresh_dir("scan-nan");
  write_tiny_config(nan_dir);
  OwnedTensor t{"model.norm.weight", DType::BF16, {4}, std::vector<std::byte>(8, std::byte{0})};
  t.bytes[5] = std::byte{0x7F};  // element 2 = 0x7FC0: NaN
  t.bytes[4] = std::byte{0xC0};
  io::write_safetensors(nan_dir / "model.safetensors", {t}, {});
  try {
    io::scan_checkpoint(io::Checkpoint::open(nan_dir), 1);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'model.norm.weight' element 2"), std::string::npos) << e.what();
  }
}

TEST(MlaWeights, LoadsDequantisedLayerFromShippedCheckpoints) {
  for (const char* name : {"tiny-v3", "tiny-v2"}) {
    const auto ckpt = io::Checkpoint::open(fs::path(MLA_SOURCE_DIR) / "datasets/synthetic" / name);
    const auto& c = ckpt.config();
    const auto w = io::load_attention_weights(ckpt, 1);
    EXPECT_EQ(w.kv_a_proj_with_mqa.rows(), c.kv_lora_rank + c.qk_rope_head_dim);
    EXPECT_EQ(w.kv_b_proj.rows(), c.num_heads * (c.qk_nope_head_dim + c.v_head_dim));
    EXPECT_EQ(w.kv_a_layernorm.size(), c.kv_lora_rank);
    EXPECT_EQ(w.q_proj.size() == 0, c.has_q_lora());
    // Same values as the checkpoint's own float64 view (dequantised for FP8).
    const MatrixR direct = ckpt.load_matrix("model.layers.1.self_attn.o_proj.weight");
    EXPECT_EQ((w.o_proj - direct).cwiseAbs().maxCoeff(), 0.0);
    EXPECT_THROW(io::load_attention_weights(ckpt, c.attention_layers()), InputError);
  }
}

TEST(Synthetic, RegenerationReproducesShippedDatasets) {
  // datasets/synthetic/README.md gives these options; a generator change that alters bytes
  // must come with regenerated datasets.
  struct Case {
    const char* name;
    io::SyntheticFormat format;
    uint64_t shard_bytes;
  };
  for (const Case& k : {Case{"tiny-v3", io::SyntheticFormat::FP8, static_cast<uint64_t>(0.3 * 1024 * 1024)},
                        Case{"tiny-v2", io::SyntheticFormat::BF16, 5ull << 30}}) {
    io::SyntheticOptions o;
    o.model = io::synthetic_preset(k.name);
    o.format = k.format;
    o.experts = -1;
    o.seed = 2024;
    o.max_shard_bytes = k.shard_bytes;
    const fs::path out = fresh_dir(std::string("regen-") + k.name) / "ckpt";
    io::write_synthetic_checkpoint(o, out);
    const fs::path shipped = fs::path(MLA_SOURCE_DIR) / "datasets/synthetic" / k.name;
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(shipped)) {
      if (e.path().extension() == ".md") continue;
      ++files;
      EXPECT_EQ(slurp(e.path()), slurp(out / e.path().filename())) << k.name << "/" << e.path().filename();
    }
    EXPECT_EQ(files, static_cast<size_t>(std::distance(fs::directory_iterator(out), fs::directory_iterator())));
  }
}

TEST(PythonCrossCheck, Fp8DequantMatchesNumpyOnShippedTinyV3) {
  // Figures from tests/io/python_dequant_reference.py (numpy, its own header parsing
  // and E4M3 decoding). Dequantisation is exact, so only summation order differs.
  struct Ref {
    const char* name;
    double sum, sumsq, last, at_130_7;
  };
  const auto ckpt = io::Checkpoint::open(fs::path(MLA_SOURCE_DIR) / "datasets/synthetic/tiny-v3");
  for (const Ref& r : {Ref{"model.layers.1.self_attn.kv_a_proj_with_mqa.weight", -1.2254470374693938,
                           159.43476956855065, -0.06921978667378426, -0.03831747663207352},
                       Ref{"model.layers.0.self_attn.kv_b_proj.weight", 22.9729263271945, 255.01709000900917,
                           -0.025256916414946318, 0.03030829969793558}}) {
    const MatrixR w = ckpt.load_matrix(r.name);
    constexpr double kSumTol = 1e-12;  // relative, summation order only
    EXPECT_NEAR(w.sum(), r.sum, kSumTol * w.cwiseAbs().sum()) << r.name;
    EXPECT_NEAR(w.squaredNorm(), r.sumsq, kSumTol * r.sumsq) << r.name;
    EXPECT_EQ(w(w.rows() - 1, w.cols() - 1), r.last) << r.name;  // single elements: exact
    EXPECT_EQ(w(130 % w.rows(), 7), r.at_130_7) << r.name;
  }
}
