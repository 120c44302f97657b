// verify-decode through the CUDA kernels (label gpu): skips cleanly without a device.
#include <gtest/gtest.h>

#include "verify/decode_backend.hpp"
#include "verify_fixture.hpp"

using namespace verify_test;

TEST(VerifyDecodeGpu, KernelsAgreeWithTwinAndFloat64) {
  if (!mla::verify::cuda_backend_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  for (auto [name, tp, g] : {std::tuple{"tp1", 1, 1}, std::tuple{"tp2g2", 2, 2}}) {
    auto o = options(convert(name, tp, g, mla::transform::Reparam::Hadamard, mla::transform::NormMode::Exact));
    o.max_rel_l2 = 1.0;  // this test is about the kernel, not the slicing approximation
    o.max_cos_diff = 1.0;
    o.device = "cuda";
    const auto gpu = mla::verify::verify_decode(o);
    o.device = "cpu";
    const auto cpu = mla::verify::verify_decode(o);
    ASSERT_EQ(gpu.layers.size(), cpu.layers.size());
    for (size_t i = 0; i < gpu.layers.size(); ++i) {
      EXPECT_LT(gpu.layers[i].kernel_vs_f64_path.rel_l2, 8e-3) << name << " layer " << gpu.layers[i].layer;
      EXPECT_NEAR(gpu.layers[i].converted_vs_original.rel_l2, cpu.layers[i].converted_vs_original.rel_l2,
                  0.05 * cpu.layers[i].converted_vs_original.rel_l2 + 1e-4);
      std::printf("[figure] %s layer %lld: gpu rel_l2 %.4e, twin rel_l2 %.4e, gpu kernel-vs-f64 %.3e\n", name,
                  static_cast<long long>(gpu.layers[i].layer), gpu.layers[i].converted_vs_original.rel_l2,
                  cpu.layers[i].converted_vs_original.rel_l2, gpu.layers[i].kernel_vs_f64_path.rel_l2);
    }
  }
}
