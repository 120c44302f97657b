// TPLA and DCP ranks on their own GPUs through NCCL (label gpu); with one GPU (or no NCCL) both ranks
// share it and sum in process. Skips cleanly without a device.
#include <gtest/gtest.h>

#include "verify/decode_backend.hpp"
#include "verify/multi_device_comm.hpp"
#include "verify/multi_device_runner.hpp"
#include "verify_fixture.hpp"

using namespace verify_test;

namespace {
// NCCL with 2 GPUs; otherwise both ranks on the one GPU, summed in process (printed, so a log
// shows which ran).
std::string comm_for_two_ranks() {
  std::string comm = "threads";
  if (mla::verify::nccl_available()) {
    try {
      mla::verify::MultiDeviceRunner probe("cuda", 2, "nccl");
      comm = "nccl";
    } catch (const mla::InputError&) {
    }
  }
  std::printf("[figure] ranks' communicator: %s\n", comm.c_str());
  return comm;
}
}  // namespace

TEST(MultiDeviceGpu, RanksOnTwoGpusEqualTheOneGpuSequentialSum) {
  if (!mla::verify::cuda_backend_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  const std::string comm = comm_for_two_ranks();
  for (auto norm : {mla::transform::NormMode::Exact, mla::transform::NormMode::Approx}) {
    const bool exact = norm == mla::transform::NormMode::Exact;
    auto o = options(convert(exact ? "tp2g2" : "tp2g2_approx", 2, 2, mla::transform::Reparam::Hadamard, norm));
    o.max_rel_l2 = 1.0;  // about the runner, not the slicing approximation
    o.max_cos_diff = 1.0;
    o.device = "cuda";
    o.devices = 2;
    o.comm = comm;
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
  if (!mla::verify::cuda_backend_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  const std::string comm = comm_for_two_ranks();
  auto o = options(convert("tp1", 1, 1, mla::transform::Reparam::Identity, mla::transform::NormMode::Approx));
  o.device = "cuda";
  o.devices = 2;
  o.comm = comm;
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

// --kv fp8 --devices 2: every rank's slice in its own FP8 cache on its own GPU (FP8 append and
// decode kernels). g = 1 (both ranks hold the whole d_c = 128 latent, each half of the heads):
// the FP8 kernels take d_c 128 / 256 / 512, so tiny-v2's g = 2 slice (d_c = 64) is refused. The
// ranks run the one-GPU path's kernels on the same bits: equal to it up to the all-reduce order.
TEST(MultiDeviceGpu, Fp8CachesOnTwoGpusEqualTheOneGpuSequentialSum) {
  if (!mla::verify::cuda_backend_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  const std::string comm = comm_for_two_ranks();
  auto o = options(convert("tp2g1", 2, 1, mla::transform::Reparam::Hadamard, mla::transform::NormMode::Exact));
  o.max_rel_l2 = 1.0;
  o.max_cos_diff = 1.0;
  o.device = "cuda";
  o.devices = 2;
  o.comm = comm;
  o.kv = "fp8";
  const auto rep = mla::verify::verify_decode(o);
  for (const auto& l : rep.layers) {
    ASSERT_TRUE(l.devices_ran);
    EXPECT_LE(l.devices_vs_sequential.rel_l2, mla::verify::kDevicesRelTolerance) << "layer " << l.layer;
    EXPECT_GT(l.kernel_vs_f64_path.rel_l2, 1e-2) << "layer " << l.layer << ": an FP8 cache's error, not BF16's";
    EXPECT_LT(l.kernel_vs_f64_path.rel_l2, 0.08) << "layer " << l.layer;
    std::printf("[figure] fp8 tp2 g1 layer %lld: 2 GPUs vs 1-GPU sequential rel_l2 %.3e; kernel vs f64 %.3e\n",
                static_cast<long long>(l.layer), l.devices_vs_sequential.rel_l2, l.kernel_vs_f64_path.rel_l2);
  }
  auto o2 = options(convert("tp2g2", 2, 2, mla::transform::Reparam::Hadamard, mla::transform::NormMode::Exact));
  o2.device = "cuda";
  o2.devices = 2;
  o2.comm = comm;
  o2.kv = "fp8";
  try {
    mla::verify::verify_decode(o2);
    ADD_FAILURE() << "an FP8 cache of a d_c = 64 slice on the GPU was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
}
