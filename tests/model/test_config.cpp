// Config parsing of each published family (fixtures under data/ modelled on the published
// config.json files) and the errors for missing / inconsistent fields.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.hpp"
#include "model/config.hpp"

using mla::InputError;
using mla::model::load_mla_config;
using mla::model::parse_mla_config;

namespace {

const std::string kData = std::string(MLA_SOURCE_DIR) + "/tests/io/data/";

nlohmann::json fixture(const std::string& name) {
  std::ifstream in(kData + name);
  return nlohmann::json::parse(in);
}

// Expects parse to throw InputError whose message contains every fragment.
void expect_error(const nlohmann::json& j, std::initializer_list<std::string> fragments) {
  try {
    parse_mla_config(j, "config.json");
    FAIL() << "no error for " << j.dump();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

// Independent formula (SPEC 1): (d_n+d_r)^-0.5 * (0.1*mscale_all_dim*ln(factor)+1)^2.
double expected_scale(double dqk, double mscale_all_dim, double factor) {
  const double m = 0.1 * mscale_all_dim * std::log(factor) + 1.0;
  return m * m / std::sqrt(dqk);
}

}  // namespace

TEST(Config, DeepSeekV2Lite) {
  const auto c = load_mla_config(kData + "deepseek-v2-lite.config.json");
  EXPECT_EQ(c.model_type, "deepseek_v2");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_FALSE(c.has_q_lora());
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.num_hidden_layers, 27);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  EXPECT_EQ(c.n_routed_experts, 64);
  ASSERT_TRUE(c.yarn.has_value());
  EXPECT_DOUBLE_EQ(c.yarn->factor, 40.0);
  EXPECT_DOUBLE_EQ(c.yarn->mscale_all_dim, 0.707);
  EXPECT_EQ(c.yarn->original_max_position_embeddings, 4096);
  EXPECT_TRUE(c.rope_interleave);  // default: no rope_interleave key in the published config
  EXPECT_NEAR(c.softmax_scale(), expected_scale(192, 0.707, 40), 1e-15);
  EXPECT_NEAR(c.softmax_scale(), 0.11472138679292612, 1e-12);  // python, independently
}

TEST(Config, DeepSeekV3) {
  const auto c = load_mla_config(kData + "deepseek-v3.config.json");
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_heads, 128);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.attention_layers(), 62);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_EQ(c.vocab_size, 129280);
  ASSERT_TRUE(c.yarn.has_value());
  EXPECT_DOUBLE_EQ(c.yarn->beta_fast, 32.0);
  // 192^-0.5 * (0.1 ln 40 + 1)^2 = 0.0721688 * 1.3688... ; computed independently here.
  EXPECT_NEAR(c.softmax_scale(), expected_scale(192, 1.0, 40), 1e-15);
  EXPECT_NEAR(c.softmax_scale(), 0.1352337788608801, 1e-12);  // python: (0.1*log(40)+1)**2/sqrt(192)
}

TEST(Config, KimiK2) {
  const auto c = load_mla_config(kData + "kimi-k2.config.json");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_DOUBLE_EQ(c.rope_theta, 50000.0);
  ASSERT_TRUE(c.yarn.has_value());
  EXPECT_DOUBLE_EQ(c.yarn->factor, 32.0);
  EXPECT_DOUBLE_EQ(c.yarn->beta_fast, 1.0);
  EXPECT_NEAR(c.softmax_scale(), expected_scale(192, 1.0, 32), 1e-15);
  EXPECT_NEAR(c.softmax_scale(), 0.13086079996295008, 1e-12);  // python, independently
}

TEST(Config, RopeParametersMatchesTopLevelForm) {
  const auto a = load_mla_config(kData + "deepseek-v3.config.json");
  const auto b = load_mla_config(kData + "deepseek-v3.rope-parameters.config.json");
  ASSERT_TRUE(b.yarn.has_value());
  EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
  EXPECT_DOUBLE_EQ(a.yarn->factor, b.yarn->factor);
  EXPECT_DOUBLE_EQ(a.yarn->mscale_all_dim, b.yarn->mscale_all_dim);
  EXPECT_EQ(a.yarn->original_max_position_embeddings, b.yarn->original_max_position_embeddings);
  EXPECT_DOUBLE_EQ(a.softmax_scale(), b.softmax_scale());
}

TEST(Config, NoYarnMeansPlainScale) {
  auto j = fixture("deepseek-v3.config.json");
  j["rope_scaling"] = nullptr;
  const auto c = parse_mla_config(j, "config.json");
  EXPECT_FALSE(c.yarn.has_value());
  EXPECT_DOUBLE_EQ(c.softmax_scale(), 1.0 / std::sqrt(192.0));
  // YaRN without mscale_all_dim: no mscale correction of the softmax scale.
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}};
  EXPECT_DOUBLE_EQ(parse_mla_config(j, "config.json").softmax_scale(), 1.0 / std::sqrt(192.0));
}

// Every rule relaxed to follow what transformers' DeepseekV2/V3 classes accept: one test each.
namespace {
bool has_warning(const mla::model::MlaConfig& c, std::initializer_list<std::string> fragments) {
  for (const auto& w : c.warnings) {
    bool all = true;
    for (const auto& f : fragments) all = all && w.find(f) != std::string::npos;
    if (all) return true;
  }
  return false;
}
}  // namespace

TEST(ConfigRelaxed, NumKeyValueHeadsIsIgnoredWithAWarning) {
  // What transformers 5.x saves for DeepseekV3Config(num_attention_heads=16): the class
  // default num_key_value_heads 128 stays.
  auto j = fixture("deepseek-v3.config.json");
  j["num_attention_heads"] = 16;
  j["num_key_value_heads"] = 128;
  const auto c = parse_mla_config(j, "config.json");
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_TRUE(has_warning(c, {"config.json", "num_key_value_heads", "128", "not used by MLA"}));
  j["num_key_value_heads"] = 8;
  EXPECT_TRUE(has_warning(parse_mla_config(j, "config.json"), {"num_key_value_heads", "8"}));
  j["num_key_value_heads"] = 16;  // the usual value: no warning
  EXPECT_TRUE(parse_mla_config(j, "config.json").warnings.empty());
}

TEST(ConfigRelaxed, MissingKeysTakeTheTransformersClassDefaults) {
  auto j = fixture("deepseek-v3.config.json");
  for (const char* k : {"kv_lora_rank", "q_lora_rank", "hidden_size", "n_routed_experts", "first_k_dense_replace"})
    j.erase(k);
  auto c = parse_mla_config(j, "config.json");
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_TRUE(has_warning(c, {"kv_lora_rank", "missing", "default 512"}));
  EXPECT_TRUE(has_warning(c, {"hidden_size", "default 7168"}));
  auto v2 = fixture("deepseek-v2-lite.config.json");
  v2.erase("kv_lora_rank");
  v2.erase("first_k_dense_replace");
  c = parse_mla_config(v2, "config.json");
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.first_k_dense_replace, 0);  // DeepseekV2Config's default
  EXPECT_FALSE(c.has_q_lora());           // q_lora_rank: null is kept, not defaulted
}

TEST(ConfigRelaxed, FirstKDenseBeyondTheLayerCountMeansAllDense) {
  auto j = fixture("deepseek-v3.config.json");
  j["first_k_dense_replace"] = 100;
  const auto c = parse_mla_config(j, "config.json");
  EXPECT_EQ(c.first_k_dense_replace, 100);
  EXPECT_TRUE(has_warning(c, {"first_k_dense_replace", "100", "num_hidden_layers", "dense"}));
}

TEST(ConfigRelaxed, YarnBetasAsTransformersReadsThem) {
  auto j = fixture("deepseek-v3.config.json");
  j["rope_scaling"]["beta_fast"] = 1;
  j["rope_scaling"]["beta_slow"] = 4;  // transformers warns, computes
  auto c = parse_mla_config(j, "config.json");
  EXPECT_DOUBLE_EQ(c.yarn->beta_slow, 4.0);
  EXPECT_TRUE(has_warning(c, {"rope_scaling.beta_slow", "beta_fast"}));
  j["rope_scaling"]["beta_fast"] = 0;  // `beta_fast or 32`
  j["rope_scaling"]["beta_slow"] = 0;
  c = parse_mla_config(j, "config.json");
  EXPECT_DOUBLE_EQ(c.yarn->beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.yarn->beta_slow, 1.0);
}

TEST(ConfigRelaxed, RopeInterleaveIsNotReadByDeepseekV2) {
  auto j = fixture("deepseek-v2-lite.config.json");
  j["rope_interleave"] = false;
  const auto c = parse_mla_config(j, "config.json");
  EXPECT_TRUE(c.rope_interleave);  // DeepseekV2 attention always rotates interleaved pairs
  EXPECT_TRUE(has_warning(c, {"rope_interleave", "DeepseekV2"}));
}

TEST(ConfigRefused, WhatChangesTheComputationIsRefusedWithTheReason) {
  const auto base = fixture("deepseek-v3.config.json");
  auto j = base;
  j["attention_bias"] = true;
  expect_error(j, {"attention_bias", "true", "not supported"});
  j = base;
  j["rope_scaling"]["truncate"] = false;
  expect_error(j, {"rope_scaling.truncate", "false", "implemented"});
  j = base;
  j["rope_scaling"]["attention_factor"] = 1.5;
  expect_error(j, {"rope_scaling.attention_factor", "1.5"});
  j = base;
  j["rope_scaling"]["truncate"] = true;  // the default is fine
  EXPECT_NO_THROW(parse_mla_config(j, "config.json"));
}

TEST(Config, RopeInterleaveKey) {
  auto j = fixture("deepseek-v3.config.json");
  j["rope_interleave"] = false;
  EXPECT_FALSE(parse_mla_config(j, "config.json").rope_interleave);
  j["rope_interleave"] = "yes";
  expect_error(j, {"config.json", "rope_interleave", "\"yes\""});
}

TEST(Config, Errors) {
  const auto base = fixture("deepseek-v3.config.json");
  auto j = base;
  // Model types without a transformers class of their own get no defaults.
  j["model_type"] = "kimi_k2";
  j.erase("kv_lora_rank");
  expect_error(j, {"config.json", "kv_lora_rank", "missing", "kimi_k2"});
  j = base;
  j["model_type"] = "kimi_k2";
  j.erase("q_lora_rank");
  expect_error(j, {"q_lora_rank", "missing"});
  j = base;
  j["hidden_size"] = "7168";
  expect_error(j, {"hidden_size", "\"7168\""});
  j = base;
  j["qk_rope_head_dim"] = 63;
  expect_error(j, {"qk_rope_head_dim", "63", "even"});
  j = base;
  j["num_attention_heads"] = 0;
  expect_error(j, {"num_attention_heads", "0"});
  j = base;
  j["rope_scaling"]["factor"] = -2;
  expect_error(j, {"rope_scaling.factor", "-2"});
  j = base;
  j["rope_scaling"].erase("factor");
  expect_error(j, {"rope_scaling.factor", "missing"});
  j = base;
  j["rope_scaling"]["type"] = "linear";
  expect_error(j, {"rope_scaling.type", "linear"});
  j = base;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 50000.0}, {"factor", 40}};
  expect_error(j, {"rope_parameters.rope_theta", "50000", "rope_theta"});
  j = base;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 20}};
  expect_error(j, {"rope_parameters.factor", "20"});
  j = base;
  j["rope_scaling"]["original_max_position_embeddings"] = 1.66667e95;  // fuzz_config_json's find
  expect_error(j, {"rope_scaling.original_max_position_embeddings", "integer"});
  j = base;
  j["rope_scaling"]["original_max_position_embeddings"] = 4096.5;
  expect_error(j, {"rope_scaling.original_max_position_embeddings", "4096.5", "integer"});
  j = base;
  j["rms_norm_eps"] = 0;
  expect_error(j, {"rms_norm_eps", "0"});
  j = base;
  j.erase("model_type");
  expect_error(j, {"model_type", "missing"});
  expect_error(nlohmann::json::array(), {"config.json", "object"});
}

TEST(Config, FileErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "/bad-config.json";
  std::ofstream(path) << "{ not json";
  try {
    load_mla_config(path);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad-config.json"), std::string::npos);
  }
  EXPECT_THROW(load_mla_config(::testing::TempDir() + "/does-not-exist.json"), InputError);
}
