// verify-decode --kv fp4 --kv4-route fp8 --device cuda (label gpu; skips cleanly without a device).
// What holds bit for bit, and what does not:
//   - the CUDA backend (the FP4 append kernel, fp8_decode_fp4_cache_bf16q) equals the FP8 decode
//     kernel (fp8_decode_bf16q) on the CPU backend's pages, i.e. the append twin's FP4 pages
//     converted by quant::fp4_cache_to_fp8, with the same num_parts: outputs and LSE bit for bit
//     (the append kernel writes the twin's bytes, tests/kernels/test_kv4_gpu.cpp Kv4Append*; the
//     route equals the FP8 decode of converted pages, Kv4Fp8RouteGpu);
//   - the GPU's FP8 decode is not the CPU twin's bit for bit (wgmma keeps fewer mantissa bits
//     between additions than fp32: tests/kernels/test_fp8_gpu.cpp, kGpuVsTwinRelL2 and
//     kGpuVsTwinLse, derived there), so the CUDA backend is within those bounds of the CPU
//     backend's fp8 route, and both within kKv4Fp8RouteKernelRelL2 of float64.
// Both backends refuse the shapes the route has no kernel for, with the same message.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "core/error.hpp"
#include "kernels/fp8_decode.hpp"
#include "kv4_problem.hpp"
#include "verify/kv4_backend.hpp"

using namespace kv4_test;

namespace {

// The FP8 decode kernel vs its CPU twin (tests/kernels/test_fp8_gpu.cpp: relative L2 of the
// outputs, absolute LSE difference).
constexpr double kGpuVsTwinRelL2 = 5e-3;
constexpr double kGpuVsTwinLse = 6e-3;

// <= 32 rows: the narrow kernel; more: the 64-row kernel (two row blocks at 128 heads).
const Kv4Shape kShapes[] = {
    Kv4Shape{{1, 130, 200}, 8, 128, 32, 64},     // the tiny models' tp = 1 slice
    Kv4Shape{{70, 257, 1000}, 16, 512, 64, 64},  // DeepSeek-V3's latent, 16 heads
    Kv4Shape{{300, 5}, 32, 512, 64, 128},        // pages of 128
    Kv4Shape{{129, 64, 3}, 64, 256, 32, 64},     // the most rows the route takes at d_c <= 256
    Kv4Shape{{65, 400}, 128, 512, 64, 64},       // 128 heads
};

template <typename T>
struct Dev {
  T* ptr = nullptr;
  explicit Dev(const std::vector<T>& h) {
    EXPECT_EQ(cudaMalloc(&ptr, h.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(ptr); }
  std::vector<T> get(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// fp8_decode_bf16q on the converted pages of the append twin's cache (the device's default parts,
// as the backend takes).
void fp8_kernel_on_converted_pages(const Problem& pr, std::vector<uint16_t>& out, std::vector<float>& lse) {
  const Kv4Shape& s = pr.sh;
  const size_t n_out = size_t(pr.batch) * s.heads * s.d_c, n_lse = size_t(pr.batch) * s.heads;
  Dev<uint8_t> cache(converted_fp8_pages(pr, params("fp4", 1).layers[0]));
  Dev<uint16_t> q(pr.q), o{std::vector<uint16_t>(n_out)};
  Dev<int32_t> table(pr.table), seqlens(pr.seqlens);
  Dev<float> l{std::vector<float>(n_lse)};
  Dev<int> flag(std::vector<int>{0});
  quant::Fp8DecodeParams p = decode_params<quant::Fp8DecodeParams>(pr.cache_shape(), s.heads, s.d_c, s.d_r, pr.scale);
  p.cache = cache.ptr;
  p.page_table = table.ptr;
  p.seqlens = seqlens.ptr;
  p.out = o.ptr;
  p.lse = l.ptr;
  p.error_flag = flag.ptr;
  Dev<char> ws{std::vector<char>(mla::kernels::fp8_decode_workspace_bytes(p, true))};
  p.workspace = ws.ptr;
  p.workspace_bytes = mla::kernels::fp8_decode_workspace_bytes(p, true);
  mla::kernels::fp8_decode_bf16q(p, q.ptr, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(flag.get(1)[0], 0);
  out = o.get(n_out);
  lse = l.get(n_lse);
}

}  // namespace

TEST(Kv4Fp8RouteGpu, CudaBackendEqualsTheFp8KernelOnTheTwinsConvertedPages) {
  REQUIRE_GPU();
  uint32_t seed = 71;
  for (const Kv4Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    const Problem pr(seed++, s);
    auto gpu = make_cuda_kv4_backend(params("fp4", 1), Kv4Route::Fp8);
    std::vector<uint16_t> og, ok;
    std::vector<float> lg, lk;
    pr.run(*gpu, og, lg);
    fp8_kernel_on_converted_pages(pr, ok, lk);
    ASSERT_EQ(og.size(), ok.size());
    size_t diff = 0;
    for (size_t i = 0; i < og.size(); ++i) diff += og[i] != ok[i] ? 1 : 0;
    EXPECT_EQ(diff, 0u) << "outputs differ at " << diff << " of " << og.size();
    EXPECT_EQ(std::memcmp(lg.data(), lk.data(), lg.size() * sizeof(float)), 0) << "LSE differs";
  }
}

TEST(Kv4Fp8RouteGpu, CudaBackendWithinTheFp8KernelsTwinBoundsOfTheCpuBackend) {
  REQUIRE_GPU();
  uint32_t seed = 71;
  for (const Kv4Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    const Problem pr(seed++, s);
    auto gpu = make_cuda_kv4_backend(params("fp4", 1), Kv4Route::Fp8);
    auto cpu = make_cpu_kv4_backend(params("fp4", 1), Kv4Route::Fp8);
    std::vector<uint16_t> og, oc;
    std::vector<float> lg, lc;
    pr.run(*gpu, og, lg);
    pr.run(*cpu, oc, lc);
    std::vector<double> dc(oc.size());
    for (size_t i = 0; i < oc.size(); ++i) dc[i] = bf16_to_float(oc[i]);
    const auto vs_cpu = vs_reference(og, dc);
    double lse_err = 0;
    for (size_t i = 0; i < lc.size(); ++i) lse_err = std::max(lse_err, std::fabs(double(lg[i]) - lc[i]));
    const auto ref = pr.reference();
    const auto mg = vs_reference(og, ref), mc = vs_reference(oc, ref);
    std::printf("[figure] %s: %s vs cpu rel_l2 %.2e lse %.1e; vs float64 gpu %.4f cpu %.4f\n", shape_name(s).c_str(),
                gpu->name().c_str(), vs_cpu.rel_l2, lse_err, mg.rel_l2, mc.rel_l2);
    EXPECT_TRUE(vs_cpu.nonfinite_match) << vs_cpu.summary();
    EXPECT_LE(vs_cpu.rel_l2, kGpuVsTwinRelL2) << vs_cpu.summary();
    EXPECT_LE(lse_err, kGpuVsTwinLse);
    EXPECT_LE(mg.rel_l2, kKv4Fp8RouteKernelRelL2) << mg.summary();
    EXPECT_LE(mc.rel_l2, kKv4Fp8RouteKernelRelL2) << mc.summary();
  }
}

TEST(Kv4Fp8RouteGpu, BothBackendsRefuseRowsTheRouteHasNoKernelFor) {
  REQUIRE_GPU();
  const Problem pr(81, Kv4Shape{{70}, 128, 256, 64, 64});
  std::unique_ptr<DecodeBackend> backends[] = {make_cuda_kv4_backend(params("fp4", 1), Kv4Route::Fp8),
                                               make_cpu_kv4_backend(params("fp4", 1), Kv4Route::Fp8)};
  for (auto& be : backends) {
    std::vector<uint16_t> out;
    std::vector<float> lse;
    try {
      pr.run(*be, out, lse);
      ADD_FAILURE() << be->name() << ": 128 rows at d_c = 256 accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("128 query rows at d_c = 256"), std::string::npos) << e.what();
    }
  }
}
