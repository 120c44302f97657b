// TPLA ranks on their own GPUs through NCCL (label gpu): skips cleanly without 2 devices or NCCL.
#include <gtest/gtest.h>

#include "verify/decode_backend.hpp"
#include "verify/multi_device_comm.hpp"
#include "verify/multi_device_runner.hpp"
#include "verify_fixture.hpp"

using namespace verify_test;

TEST(MultiDeviceGpu, RanksOnTwoGpusEqualTheOneGpuSequentialSum) {
  if (!mla::verify::cuda_backend_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  if (!mla::verify::nccl_available()) GTEST_SKIP() << "a build without NCCL";
  try {
    mla::verify::MultiDeviceRunner probe("cuda", 2);
  } catch (const mla::InputError& e) {
    GTEST_SKIP() << e.what();  // fewer than 2 GPUs
  }
  for (auto norm : {mla::transform::NormMode::Exact, mla::transform::NormMode::Approx}) {
    const bool exact = norm == mla::transform::NormMode::Exact;
    auto o = options(convert(exact ? "tp2g2" : "tp2g2_approx", 2, 2, mla::transform::Reparam::Hadamard, norm));
    o.max_rel_l2 = 1.0;  // about the runner, not the slicing approximation
    o.max_cos_diff = 1.0;
    o.device = "cuda";
    o.devices = 2;
    const auto rep = mla::verify::verify_decode(o);
    for (const auto& l : rep.layers) {
      ASSERT_TRUE(l.devices_ran);
      EXPECT_LE(l.devices_vs_sequential.rel_l2, mla::verify::kDevicesRelTolerance) << "layer " << l.layer;
      EXPECT_LT(l.kernel_vs_f64_path.rel_l2, 8e-3) << "layer " << l.layer;
      std::printf("[figure] %s layer %lld: 2 GPUs vs 1-GPU sequential rel_l2 %.3e max_abs %.3e; kernel vs f64 %.3e\n",
                  exact ? "exact" : "approx", static_cast<long long>(l.layer), l.devices_vs_sequential.rel_l2,
                  l.devices_vs_sequential.max_abs, l.kernel_vs_f64_path.rel_l2);
    }
  }
}

TEST(MultiDeviceGpu, DcpOnTwoGpusEqualsTheOneGpuDecodeWithinBf16) {
  if (!mla::verify::cuda_backend_available() || !mla::verify::nccl_available()) GTEST_SKIP() << "no CUDA device or no NCCL";
  try {
    mla::verify::MultiDeviceRunner probe("cuda", 2);
  } catch (const mla::InputError& e) {
    GTEST_SKIP() << e.what();
  }
  auto o = options(convert("tp1", 1, 1, mla::transform::Reparam::Identity, mla::transform::NormMode::Approx));
  o.device = "cuda";
  o.devices = 2;
  o.dcp = true;
  const auto rep = mla::verify::verify_decode(o);
  EXPECT_TRUE(rep.pass);
  for (const auto& l : rep.layers) {
    ASSERT_TRUE(l.devices_ran);
    EXPECT_LE(l.devices_vs_sequential.rel_l2, o.kernel_rel_l2) << "layer " << l.layer;
    std::printf("[figure] DCP layer %lld: 2 GPUs vs 1 GPU rel_l2 %.3e; vs float64 %.3e\n", static_cast<long long>(l.layer),
                l.devices_vs_sequential.rel_l2, l.kernel_vs_f64_path.rel_l2);
  }
}
