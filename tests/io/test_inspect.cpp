// mla-inspect's numbers against values computed independently here (SPEC section 4 formulas
// written out by hand, parameter counts from the config dimensions).
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "io/inspect.hpp"
#include "io/synthetic.hpp"
#include "model/config.hpp"

using namespace mla;
using io::KvFormat;
using io::kv_bytes_per_token_layer;
namespace fs = std::filesystem;

TEST(Inspect, KvBytesAtDeepSeekDims) {
  EXPECT_EQ(kv_bytes_per_token_layer(KvFormat::BF16, 512, 64), 1152);  // (512+64)*2
  EXPECT_EQ(kv_bytes_per_token_layer(KvFormat::FP8, 512, 64), 644);    // 512 + 4 + 128
  EXPECT_EQ(kv_bytes_per_token_layer(KvFormat::FP4, 512, 64), 400);    // 256 + 16 + 128
  // TPLA tp=4: latent 128 per rank, RoPE part replicated.
  EXPECT_EQ(kv_bytes_per_token_layer(KvFormat::BF16, 128, 64), 384);
  EXPECT_EQ(kv_bytes_per_token_layer(KvFormat::FP8, 128, 64), 260);
  EXPECT_EQ(kv_bytes_per_token_layer(KvFormat::FP4, 128, 64), 196);
  EXPECT_THROW(kv_bytes_per_token_layer(KvFormat::FP4, 48, 64), InputError);
}

TEST(Inspect, TinyV3CountsAndKvTable) {
  io::SyntheticOptions o;
  o.model = io::synthetic_preset("tiny-v3");
  o.experts = -1;
  const fs::path dir = fs::path(::testing::TempDir()) / "mla-inspect-tiny-v3";
  fs::remove_all(dir);
  io::write_synthetic_checkpoint(o, dir);
  const auto r = io::inspect_checkpoint(io::Checkpoint::open(dir));
  const auto& c = r.config;
  // tiny-v3: D=256 H=4 q_lora=128 d_c=128 d_n=d_r=d_v=32, 2 layers (layer 0 dense, I=192;
  // layer 1 MoE: 4 experts of 32, 1 shared), vocab 256.
  const int64_t attn_per_layer = 128 * 256 + (4 * 64) * 128 + (128 + 32) * 256 + (4 * 64) * 128 + 256 * (4 * 32);
  EXPECT_EQ(r.params.at("attention"), 2 * attn_per_layer);
  EXPECT_EQ(r.params.at("norms"), 2 * (256 + 256 + 128 + 128) + 256);
  EXPECT_EQ(r.params.at("embeddings"), 2 * 256 * 256);
  EXPECT_EQ(r.params.at("mlp_dense"), 3 * 192 * 256);
  EXPECT_EQ(r.params.at("moe"), 4 * 3 * 32 * 256 + 3 * 32 * 256 + 4 * 256 + 4);
  EXPECT_EQ(r.layers_with_attention, 2);
  EXPECT_EQ(r.kv_bf16, (128 + 32) * 2);
  EXPECT_EQ(r.kv_fp8, 128 + 4 + 64);
  EXPECT_EQ(r.kv_fp4, 64 + 4 + 64);
  ASSERT_EQ(r.kv_per_device.size(), 4u);
  EXPECT_EQ(r.kv_per_device[0].bf16, 2 * 320);
  EXPECT_EQ(r.kv_per_device[3].tp, 8);
  EXPECT_EQ(r.kv_per_device[3].bf16, 2 * (16 + 32) * 2);
  EXPECT_EQ(r.kv_per_device[3].fp4, 0);  // 16-wide slice: not a whole FP4 group of 32
  EXPECT_EQ(r.dtypes.at("F8_E4M3").tensors, r.fp8_weights);
  EXPECT_EQ(r.family, "DeepSeek-V3 / R1");
  const auto j = io::inspect_to_json(r);
  EXPECT_EQ(j["kv_bytes_per_token_per_layer"]["fp8"], 196);
  EXPECT_NE(io::inspect_to_table(r).find("TPLA tp=2"), std::string::npos);
  EXPECT_EQ(c.kv_lora_rank, 128);
}

TEST(Inspect, PartsOfTensorNames) {
  EXPECT_EQ(io::tensor_part("model.layers.3.self_attn.kv_b_proj.weight"), "attention");
  EXPECT_EQ(io::tensor_part("model.layers.3.self_attn.kv_a_layernorm.weight"), "norms");
  EXPECT_EQ(io::tensor_part("model.layers.3.self_attn.kv_b_proj.weight_scale_inv"), "scales");
  EXPECT_EQ(io::tensor_part("model.layers.3.mlp.experts.17.up_proj.weight"), "moe");
  EXPECT_EQ(io::tensor_part("model.layers.0.mlp.down_proj.weight"), "mlp_dense");
  EXPECT_EQ(io::tensor_part("lm_head.weight"), "embeddings");
  EXPECT_EQ(io::tensor_part("model.layers.61.eh_proj.weight"), "other");
}

TEST(Inspect, ConfigParameterCountsMatchPublishedModelSizes) {
  // Published sizes (model cards): DeepSeek-V2-Lite 15.7B, DeepSeek-V3 671B (main model, MTP
  // excluded), Kimi-K2 ~1.03T. Independent of our code: only the configs come from fixtures.
  const std::string data = std::string(MLA_SOURCE_DIR) + "/tests/io/data/";
  auto total = [&](const char* f) {
    return static_cast<double>(io::config_parameter_counts(model::load_mla_config(data + f)).at("total"));
  };
  EXPECT_NEAR(total("deepseek-v2-lite.config.json"), 15.7e9, 0.05e9);
  EXPECT_NEAR(total("deepseek-v3.config.json"), 671e9, 0.5e9);
  EXPECT_NEAR(total("kimi-k2.config.json"), 1.03e12, 0.02e12);
  // V3 attention, by hand: 61 x (1536*7168 + 24576*1536 + 576*7168 + 32768*512 + 7168*16384).
  const auto v3 = io::config_parameter_counts(model::load_mla_config(data + "deepseek-v3.config.json"));
  EXPECT_EQ(v3.at("attention"), 61LL * 187105280LL);
}
