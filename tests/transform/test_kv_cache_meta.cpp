// The KV-format metadata mla-convert --kv-cache writes (transform/kv_cache_meta.hpp), and a
// conversion of the tiny model with it: each rank's config.json kv_cache section and
// hf_quant_config.json, both listed in the manifest.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "common/scratch_dir.hpp"
#include "core/error.hpp"
#include "transform/convert.hpp"
#include "transform/kv_cache_meta.hpp"

using namespace mla;
using namespace mla::transform;

TEST(KvCacheMeta, Fp8SectionAndModelOptConfig) {
  const auto s = kv_cache_section("fp8", 512, 64, 61);
  EXPECT_EQ(s["format"], "fp8_e4m3_rope_aware_per_token");
  EXPECT_EQ(s["bytes_per_token_per_layer"], 644);
  EXPECT_EQ(s["bytes_per_token"], 644 * 61);
  EXPECT_EQ(s["rope"]["divided_by_scale"], true);
  EXPECT_EQ(kv_cache_section("fp8", 256, 64, 1)["bytes_per_token_per_layer"], 256 + 128 + 4);  // a TPLA tp=2 slice
  EXPECT_EQ(kv_cache_section("bf16", 512, 64, 1)["bytes_per_token_per_layer"], 1152);
  const auto h = hf_quant_config("fp8", "x");
  EXPECT_EQ(h["quantization"]["kv_cache_quant_algo"], "FP8");
  EXPECT_TRUE(h["quantization"]["quant_algo"].is_null());
  EXPECT_TRUE(hf_quant_config("bf16", "x").is_null());
  EXPECT_THROW(kv_cache_section("fp5", 512, 64, 1), InputError);
  EXPECT_THROW(kv_cache_section("fp8", 96, 64, 1), InputError);  // no FP8 page layout for 96 channels
}

TEST(KvCacheMeta, ConvertRecordsTheFormatPerRank) {
  const std::filesystem::path model = std::filesystem::path(MLA_SOURCE_DIR) / "datasets" / "tiny-v2";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP() << "tiny model not present";
  const mla::test::ScratchDir scratch("mla_kvmeta");
  const auto out = scratch / "converted";
  ConvertOptions o;
  o.input = model;
  o.output = out;
  o.tp = 2;
  o.kv_cache = "fp8";
  const auto res = convert_checkpoint(o);
  int ranks = 0;
  for (const auto& d : std::filesystem::directory_iterator(out)) {
    if (!d.is_directory()) continue;
    ++ranks;
    std::ifstream cf(d.path() / "config.json");
    const auto cfg = nlohmann::json::parse(cf);
    ASSERT_TRUE(cfg.contains("kv_cache")) << d.path();
    EXPECT_EQ(cfg["kv_cache"]["latent_width"], 64);  // tiny-v2: d_c = 128 over 2 ranks
    EXPECT_EQ(cfg["kv_cache"]["bytes_per_token_per_layer"], 64 + 64 + 4);
    std::ifstream hf(d.path() / "hf_quant_config.json");
    ASSERT_TRUE(hf.good()) << d.path();
    EXPECT_EQ(nlohmann::json::parse(hf)["quantization"]["kv_cache_quant_algo"], "FP8");
    const std::string rel = d.path().filename().string() + "/hf_quant_config.json";
    EXPECT_TRUE(res.manifest["outputs"].contains(rel)) << rel;
  }
  EXPECT_EQ(ranks, 2);
}
