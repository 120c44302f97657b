#pragma once
// The GPU tests' guard (label gpu): CI machines have no device, so a test without one is skipped,
// not failed. Use REQUIRE_GPU(); as a test body's first statement.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace mla::test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace mla::test

#define REQUIRE_GPU() \
  if (!::mla::test::have_gpu()) GTEST_SKIP() << "no CUDA device: GPU test skipped"
