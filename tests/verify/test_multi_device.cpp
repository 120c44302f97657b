// The multi-device TPLA runner through its CPU stand-in (one thread per rank, in-process
// all-reduce): rank placement, which tensors are all-reduced and how many values, equality with
// the one-device sequential sum, and the communicator's own contract.
#include <gtest/gtest.h>

#include <thread>

#include "core/error.hpp"
#include "model/test_fixtures.hpp"
#include "verify/multi_device_comm.hpp"
#include "verify/multi_device_runner.hpp"
#include "io/checkpoint.hpp"
#include "model/attention_reference.hpp"
#include "verify_fixture.hpp"

using namespace verify_test;
using mla::transform::NormMode;
using mla::transform::Reparam;
using mla::verify::ReductionRecord;

TEST(ThreadCommunicator, SumsInPlaceOnEveryRank) {
  auto comms = mla::verify::make_thread_communicators(3);
  std::vector<std::vector<double>> data{{1, 2, 3}, {10, 20, 30}, {100, 200, 300.5}};
  std::vector<std::thread> t;
  for (int r = 0; r < 3; ++r) t.emplace_back([&, r] {
    for (int rep = 0; rep < 2; ++rep) comms[r]->all_reduce_sum(data[r].data(), data[r].size());
  });
  for (auto& th : t) th.join();
  // Two sums in a row: 3 x (111, 222, 333.5) after the second.
  for (int r = 0; r < 3; ++r) EXPECT_EQ(data[r], (std::vector<double>{333, 666, 1000.5})) << "rank " << r;
  EXPECT_EQ(comms[1]->rank(), 1);
  EXPECT_EQ(comms[1]->size(), 3);
}

TEST(ThreadCommunicator, CountMismatchFailsOnEveryRankInsteadOfHanging) {
  auto comms = mla::verify::make_thread_communicators(2);
  std::vector<double> a(4, 1.0), b(5, 1.0);
  int failures = 0;
  std::mutex m;
  std::vector<std::thread> t;
  for (int r = 0; r < 2; ++r) t.emplace_back([&, r] {
    try {
      auto& v = r == 0 ? a : b;
      comms[r]->all_reduce_sum(v.data(), v.size());
    } catch (const mla::Error& e) {
      std::lock_guard<std::mutex> l(m);
      ++failures;
      EXPECT_NE(std::string(e.what()).find("sums"), std::string::npos) << e.what();
    }
  });
  for (auto& th : t) th.join();
  EXPECT_EQ(failures, 2);
}

TEST(ThreadCommunicator, AbortReleasesAWaitingRank) {
  auto comms = mla::verify::make_thread_communicators(2);
  std::vector<double> a(2, 1.0);
  std::thread waiter([&] { EXPECT_THROW(comms[0]->all_reduce_sum(a.data(), a.size()), mla::Error); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort();  // rank 1 "failed" and never joins the sum
  waiter.join();
}

namespace {

// The reductions one layer must make on every rank (SPEC section 6): the prompt's sums of
// squares (PD separation writes the exact global x), then per decoded token the exact-norm sum
// of squares (only under --norm exact) and the o_proj partial outputs.
std::vector<ReductionRecord> expected_reductions(int64_t layer, bool exact, int64_t B, int64_t P, int64_t T, int64_t D) {
  std::vector<ReductionRecord> r{{layer, "norm_sumsq", size_t(B * P)}};
  for (int64_t t = 0; t < T; ++t) {
    if (exact) r.push_back({layer, "norm_sumsq", size_t(B)});
    r.push_back({layer, "o_proj", size_t(B * D)});
  }
  return r;
}

}  // namespace

TEST(MultiDeviceRunner, TwoRanksOnThreadsEqualTheSequentialSumBitForBit) {
  auto o = options(convert("tp2g2", 2, 2, Reparam::Hadamard, NormMode::Exact));
  o.max_rel_l2 = 1.0;  // about the runner, not the slicing approximation
  o.max_cos_diff = 1.0;
  const auto seq = mla::verify::verify_decode(o);
  o.devices = 2;
  const auto rep = mla::verify::verify_decode(o);
  ASSERT_EQ(rep.layers.size(), seq.layers.size());
  EXPECT_FALSE(rep.devices.empty());
  for (size_t i = 0; i < rep.layers.size(); ++i) {
    const auto& l = rep.layers[i];
    ASSERT_TRUE(l.devices_ran);
    // Two ranks: a + b either way, the same kernels (twin) on the same bits.
    EXPECT_EQ(l.devices_vs_sequential.max_abs, 0.0) << "layer " << l.layer;
    EXPECT_TRUE(l.devices_vs_sequential.nonfinite_match);
    EXPECT_EQ(l.converted_vs_original.rel_l2, seq.layers[i].converted_vs_original.rel_l2);
    EXPECT_TRUE(l.pass);
  }
}

// --kv fp8 with --devices: each rank thread holds its slice in the FP8 cache (its own FP8 twin
// backend); two ranks sum a + b either way, so the result is the sequential FP8 decode's bit for bit.
TEST(MultiDeviceRunner, Fp8CachesOnTwoRankThreadsEqualTheSequentialSumBitForBit) {
  auto o = options(convert("tp2g2", 2, 2, Reparam::Hadamard, NormMode::Exact));
  o.max_rel_l2 = 1.0;
  o.max_cos_diff = 1.0;
  o.kv = "fp8";
  const auto seq = mla::verify::verify_decode(o);
  o.devices = 2;
  const auto rep = mla::verify::verify_decode(o);
  ASSERT_EQ(rep.layers.size(), seq.layers.size());
  for (size_t i = 0; i < rep.layers.size(); ++i) {
    const auto& l = rep.layers[i];
    ASSERT_TRUE(l.devices_ran);
    EXPECT_EQ(l.devices_vs_sequential.max_abs, 0.0) << "layer " << l.layer;
    EXPECT_TRUE(l.devices_vs_sequential.nonfinite_match);
    // The FP8 cache, not the BF16 one: the kernel path's error is the FP8 decode's.
    EXPECT_EQ(l.kernel_vs_f64_path.rel_l2, seq.layers[i].kernel_vs_f64_path.rel_l2) << "layer " << l.layer;
    EXPECT_GT(l.kernel_vs_f64_path.rel_l2, 1e-2) << "layer " << l.layer << ": an FP8 cache's error, not BF16's";
    EXPECT_TRUE(l.pass) << "layer " << l.layer;
  }
  // DCP ranks hold the BF16 cache only: refused, naming both options.
  o.dcp = true;
  try {
    mla::verify::verify_decode(o);
    ADD_FAILURE() << "--kv fp8 --dcp was accepted";
  } catch (const mla::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--dcp"), std::string::npos) << e.what();
  }
}

TEST(MultiDeviceRunner, FourRanksInTwoGroupsEqualTheSequentialSum) {
  auto o = options(convert("tp4g2", 4, 2, Reparam::Hadamard, NormMode::Exact));
  o.max_rel_l2 = 1.0;
  o.max_cos_diff = 1.0;
  o.devices = 4;
  const auto rep = mla::verify::verify_decode(o);
  for (const auto& l : rep.layers) {
    ASSERT_TRUE(l.devices_ran);
    // Same bits in, float64 sums in another order (and ranks of one group each adding half
    // of their group's sum of squares): equal up to the order of float64 additions.
    EXPECT_LE(l.devices_vs_sequential.rel_l2, mla::verify::kDevicesRelTolerance) << "layer " << l.layer;
    EXPECT_TRUE(l.pass) << "layer " << l.layer;
    std::printf("[figure] tp4 g2 layer %lld: ranks-on-threads vs sequential rel_l2 %.3e\n",
                static_cast<long long>(l.layer), l.devices_vs_sequential.rel_l2);
  }
}

namespace {

struct RunnerInputs {
  mla::model::MlaConfig cfg;
  std::vector<mla::io::RankAttention> ranks;
  std::vector<mla::MatrixR> h;
};

RunnerInputs runner_inputs(const fs::path& converted, int tp, int64_t layer, int64_t B, int64_t n_tok) {
  RunnerInputs in;
  in.cfg = mla::io::Checkpoint::open(tiny_v2()).config();
  for (int r = 0; r < tp; ++r)
    in.ranks.push_back(mla::io::load_rank_attention(converted / mla::io::rank_dir_name(r, tp), layer));
  for (int64_t b = 0; b < B; ++b) in.h.push_back(mla::model::random_matrix(n_tok, in.cfg.hidden_size, 100 + b));
  return in;
}

}  // namespace

TEST(MultiDeviceRunner, PlacementAndReductionsPerLayer) {
  const int64_t B = 2, P = 5, T = 3;
  for (auto [name, tp, g, norm] : {std::tuple{"tp4g2_approx", 4, 2, NormMode::Approx}, std::tuple{"tp2g2", 2, 2, NormMode::Exact}}) {
    const bool exact = norm == NormMode::Exact;
    const RunnerInputs in = runner_inputs(convert(name, tp, g, Reparam::Hadamard, norm), tp, 3, B, P + T);
    mla::verify::MultiDeviceRunner runner("cpu", tp);
    const auto out = runner.decode_layer(3, in.cfg, in.ranks, in.h, P, T, 64, 1);
    const auto out2 = runner.decode_layer(4, in.cfg, in.ranks, in.h, P, T, 64, 1);
    ASSERT_EQ(out.size(), size_t(B));
    EXPECT_EQ(out[0].rows(), T);
    EXPECT_EQ(out[0].cols(), in.cfg.hidden_size);
    EXPECT_TRUE(out[1].allFinite());
    EXPECT_EQ(out[1], out2[1]);  // the same inputs again: the same bits
    ASSERT_EQ(runner.placement().size(), size_t(tp));
    for (int r = 0; r < tp; ++r) {
      const auto& p = runner.placement()[r];
      EXPECT_EQ(p.rank, r);
      EXPECT_EQ(p.device, r);
      EXPECT_EQ(p.group, r / (tp / g)) << name << " rank " << r;
      EXPECT_EQ(p.heads, in.cfg.num_heads / (tp / g)) << name;
      EXPECT_EQ(p.latent_width, in.cfg.kv_lora_rank / g) << name;
      auto expected = expected_reductions(3, exact, B, P, T, in.cfg.hidden_size);
      const auto second = expected_reductions(4, exact, B, P, T, in.cfg.hidden_size);
      expected.insert(expected.end(), second.begin(), second.end());
      EXPECT_EQ(runner.reductions()[r], expected) << name << " rank " << r;
    }
  }
}

TEST(MultiDeviceRunner, RefusesAnotherNumberOfDevicesThanRanks) {
  const RunnerInputs in = runner_inputs(convert("tp2g2", 2, 2, Reparam::Hadamard, NormMode::Exact), 2, 0, 1, 4);
  mla::verify::MultiDeviceRunner runner("cpu", 3);
  try {
    runner.decode_layer(0, in.cfg, in.ranks, in.h, 2, 2, 64, 1);
    FAIL() << "expected InputError";
  } catch (const mla::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--devices 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mla::verify::MultiDeviceRunner("tpu", 2), mla::InputError);
  EXPECT_THROW(mla::verify::MultiDeviceRunner("cpu", 2, "nccl"), mla::InputError);
  EXPECT_THROW(mla::verify::MultiDeviceRunner("cpu", 2, "mpi"), mla::InputError);
  EXPECT_THROW(mla::verify::MultiDeviceRunner("cpu", 0), mla::InputError);
}

TEST(MultiDeviceRunner, DcpEqualsTheOneDeviceDecodeWithinBf16) {
  // Decode context parallelism on a tp = 1 conversion: exact up to the bf16 partial outputs.
  auto o = options(convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx));
  o.dcp = true;
  for (auto [devices, prefill] : {std::pair{2, int64_t(24)}, std::pair{3, int64_t(1)}}) {
    // prefill 1 on 3 ranks: ranks 1 and 2 hold no token at the first decode step(s).
    o.devices = devices;
    o.prefill = prefill;
    const auto rep = mla::verify::verify_decode(o);
    EXPECT_TRUE(rep.pass);
    for (const auto& l : rep.layers) {
      ASSERT_TRUE(l.devices_ran);
      EXPECT_LE(l.devices_vs_sequential.rel_l2, o.kernel_rel_l2) << devices << " ranks, layer " << l.layer;
      EXPECT_GT(l.devices_vs_sequential.rel_l2, 0.0);  // bf16 partials merged: not bit-equal
      EXPECT_LT(l.kernel_vs_f64_path.rel_l2, o.kernel_rel_l2);
      std::printf("[figure] DCP %d ranks (prefill %lld) layer %lld: vs one device rel_l2 %.3e, vs float64 %.3e\n", devices,
                  static_cast<long long>(prefill), static_cast<long long>(l.layer), l.devices_vs_sequential.rel_l2,
                  l.kernel_vs_f64_path.rel_l2);
    }
  }
}

TEST(MultiDeviceRunner, DcpReductionsAndRefusals) {
  const int64_t B = 2, P = 4, T = 3;
  const RunnerInputs in = runner_inputs(convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx), 1, 2, B, P + T);
  mla::verify::MultiDeviceRunner runner("cpu", 2);
  runner.decode_layer_dcp(2, in.cfg, in.ranks[0], in.h, P, T, 64, 1);
  std::vector<ReductionRecord> expected;
  for (int64_t t = 0; t < T; ++t) {
    expected.push_back({2, "dcp_lse", size_t(2 * B * in.cfg.num_heads)});
    expected.push_back({2, "o_proj", size_t(B * in.cfg.hidden_size)});
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(runner.reductions()[r], expected) << "rank " << r;
    EXPECT_EQ(runner.placement()[r].heads, in.cfg.num_heads);
    EXPECT_EQ(runner.placement()[r].latent_width, in.cfg.kv_lora_rank);
  }
  const RunnerInputs tpla = runner_inputs(convert("tp2g2", 2, 2, Reparam::Hadamard, NormMode::Exact), 2, 0, 1, 4);
  EXPECT_THROW(runner.decode_layer_dcp(0, tpla.cfg, tpla.ranks[0], tpla.h, 2, 2, 64, 1), mla::InputError);
  auto o = options(convert("tp1", 1, 1, Reparam::Identity, NormMode::Approx));
  o.dcp = true;  // without --devices
  EXPECT_THROW(mla::verify::verify_decode(o), mla::InputError);
}
