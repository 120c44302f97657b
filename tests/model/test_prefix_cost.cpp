// Shared-prefix cost model: the paper's Table 1 (DeepSeek-V3 column), B_theta of eq. 1 and the
// HBM overhead of the decompressed prefix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/prefix_cost.hpp"

namespace mla::model {
namespace {

TEST(PrefixCost, TableOneDeepSeekV3Column) {
  const PrefixShape s = deepseek_v3_shape();
  const int64_t B = 3, Ls = 1000, Ln = 10;
  const PrefixCost c = prefix_cost(s, B, Ls, Ln);
  // Table 1 (x 1024): naive 40 B L_s + 40 B L_n MACs, absorb 136 B L_s + 136 B L_n,
  // HBM words: naive 40 L_s + 40 B L_n, absorb 0.5625 L_s + 0.5625 B L_n.
  EXPECT_DOUBLE_EQ(c.naive_shared.macs, 40.0 * 1024 * B * Ls);
  EXPECT_DOUBLE_EQ(c.naive_own.macs, 40.0 * 1024 * B * Ln);
  EXPECT_DOUBLE_EQ(c.absorb_shared.macs, 136.0 * 1024 * B * Ls);
  EXPECT_DOUBLE_EQ(c.absorb_own.macs, 136.0 * 1024 * B * Ln);
  EXPECT_DOUBLE_EQ(c.naive_shared.bytes, 2 * 40.0 * 1024 * Ls);
  EXPECT_DOUBLE_EQ(c.absorb_own.bytes, 2 * 0.5625 * 1024 * B * Ln);
  const FormCost m = c.mixed();
  EXPECT_DOUBLE_EQ(m.macs, 1024.0 * (40.0 * B * Ls + 136.0 * B * Ln));
  EXPECT_DOUBLE_EQ(m.bytes, 2 * 1024.0 * (40.0 * Ls + 0.5625 * B * Ln));
  // The shared part's MAC ratio absorb / naive is 136 / 40 = 3.4 (paper, section 3.2).
  EXPECT_NEAR(c.absorb_shared.macs / c.naive_shared.macs, 3.4, 1e-12);
}

TEST(PrefixCost, ThresholdOfThePaper) {
  // Ascend NPU of the paper: T = 376 TOPS, M = 1.8 TB/s -> B_theta = 61 for DeepSeek-V3.
  EXPECT_NEAR(batch_threshold(deepseek_v3_shape(), 376e12, 1.8e12), 61.4, 0.1);
  // H does not enter; S_q = 2 halves it.
  EXPECT_DOUBLE_EQ(batch_threshold(kimi_k2_shape(), 376e12, 1.8e12), batch_threshold(deepseek_v3_shape(), 376e12, 1.8e12));
  PrefixShape mtp = kimi_k2_shape();
  mtp.s_q = 2;
  EXPECT_DOUBLE_EQ(2 * batch_threshold(mtp, 376e12, 1.8e12), batch_threshold(kimi_k2_shape(), 376e12, 1.8e12));
  EXPECT_THROW(batch_threshold(mtp, 0.0, 1e12), InputError);
}

TEST(PrefixCost, ThresholdIsWhereTheSharedPartsBreakEven) {
  // At B_theta the naive prefix read time equals the absorbed prefix MAC time.
  const PrefixShape s = kimi_k2_shape();
  const double flops = 700e12, bw = 4.5e12;
  const double bt = batch_threshold(s, flops, bw);
  const int64_t Ls = 4096;
  const PrefixCost c = prefix_cost(s, 1, Ls, 0);
  const double naive_read_s = c.naive_shared.bytes / bw;
  const double absorb_mac_s_per_request = c.absorb_shared.macs / (flops / 2);
  EXPECT_NEAR(bt * absorb_mac_s_per_request, naive_read_s, 1e-9 * naive_read_s);
}

TEST(PrefixCost, MemoryOverhead) {
  const PrefixShape s = deepseek_v3_shape();
  const PrefixMemory m = prefix_memory(s, 512, 26472, 512);
  EXPECT_DOUBLE_EQ(m.decompressed_bytes, 26472.0 * 128 * 320 * 2);
  EXPECT_DOUBLE_EQ(m.latent_prefix_bytes, 26472.0 * 576 * 2);
  EXPECT_DOUBLE_EQ(m.latent_cache_bytes, (26472.0 + 512.0 * 512) * 576 * 2);
  EXPECT_DOUBLE_EQ(m.overhead_fraction, m.decompressed_bytes / m.latent_cache_bytes);
}

TEST(PrefixCost, ReportJsonAndBadInput) {
  const auto j = nlohmann::json::parse(prefix_cost_report(kimi_k2_shape(), 512, 26472, 512, 700e12, 4.5e12, true));
  EXPECT_TRUE(j["mixed_path_used"].get<bool>());
  EXPECT_GT(j["model_speedup_mixed_vs_absorb"].get<double>(), 2.5);
  EXPECT_LT(j["model_speedup_mixed_vs_absorb"].get<double>(), 3.4);
  const auto small = nlohmann::json::parse(prefix_cost_report(kimi_k2_shape(), 8, 26472, 512, 700e12, 4.5e12, true));
  EXPECT_FALSE(small["mixed_path_used"].get<bool>());
  EXPECT_DOUBLE_EQ(small["model_speedup_mixed_vs_absorb"].get<double>(), 1.0);
  EXPECT_NE(prefix_cost_report(kimi_k2_shape(), 8, 100, 1, 1e12, 1e12, false).find("B_theta"), std::string::npos);
  EXPECT_THROW(prefix_cost(kimi_k2_shape(), 0, 10, 1), InputError);
  PrefixShape bad = kimi_k2_shape();
  bad.heads = 0;
  try {
    prefix_cost(bad, 1, 10, 1);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("heads = 0"), std::string::npos);
  }
}

}  // namespace
}  // namespace mla::model
