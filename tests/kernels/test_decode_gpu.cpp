// GPU tests of the BF16 decode and cache-append kernels (label gpu; skipped without a device):
// GPU vs float64 reference (SPEC section 5 tolerances) and vs the CPU twin, on adversarial
// paged layouts; CUDA-graph capture; bad page ids flagged; TPLA ranks run one after another
// with their o_proj outputs summed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "common/gpu.hpp"
#include "core/error.hpp"
#include "decode_case.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cache_append.hpp"
#include "kernels/mla_decode.hpp"

namespace mla::test {
namespace {

template <class T>
using DevBuf = cuda::DeviceBuffer<T>;

// The case's buffers on the device, and params pointing at them.
struct DeviceCase {
  DevBuf<uint16_t> q, cache, out;
  DevBuf<int32_t> table, seqlens;
  DevBuf<float> lse;
  DevBuf<char> ws;
  DevBuf<int> flag;
  kernels::Bf16DecodeParams p;
  DeviceCase(const DecodeCase& c, int parts)
      : q(c.q), cache(c.cache), out(c.out), table(c.page_table), seqlens(c.seqlens), lse(c.lse),
        ws(quant::decode_workspace_bytes(c.batch, c.s_q, c.heads, c.d_c, parts)), flag(std::vector<int>{0}) {
    p = const_cast<DecodeCase&>(c).host_params(parts);
    p.q = q.ptr;
    p.kv_cache = cache.ptr;
    p.page_table = table.ptr;
    p.seqlens = seqlens.ptr;
    p.out = out.ptr;
    p.lse = lse.ptr;
    p.workspace = ws.ptr;
    p.workspace_bytes = ws.count;
    p.error_flag = flag.ptr;
    // NaN everywhere the kernels write: an output or split partial left unwritten shows.
    EXPECT_EQ(cudaMemset(out.ptr, 0xFF, out.count * sizeof(uint16_t)), cudaSuccess);
    EXPECT_EQ(cudaMemset(lse.ptr, 0xFF, lse.count * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemset(ws.ptr, 0xFF, ws.count), cudaSuccess);
  }
};

struct GpuCaseSpec {
  const char* name;
  std::vector<int32_t> seqlens;
  int s_q, heads, d_c, d_r, page_size;
  int variant = 0;  // > 16 rows: 0 = the default path for the shape, 7 = the mma.sync 64-row path
  int parts = 0;    // split-KV parts; 0 = the path's default
};

void run_gpu_case(const GpuCaseSpec& s, uint64_t seed) {
  SCOPED_TRACE(s.name);
  DecodeCase c = make_decode_case(s.seqlens, s.s_q, s.heads, s.d_c, s.d_r, s.page_size, seed);
  quant::Bf16DecodeParams shape = c.host_params(0);
  shape.variant = s.variant;
  const int parts = s.parts > 0 ? s.parts : kernels::decode_parts_for_device(shape);  // the path's own default
  DeviceCase d(c, parts);
  d.p.variant = s.variant;
  kernels::mla_decode_bf16(d.p, nullptr);
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::vector<uint16_t> gpu_out = d.out.download();
  const std::vector<float> gpu_lse = d.lse.download();
  EXPECT_EQ(d.flag.download()[0], 0);
  // A second call on the same workspace gives the same bits (v6's fused merge puts its counters
  // back to zero; the scheduler zeroes them anyway, so the planned call is what tests that).
  kernels::mla_decode_bf16_plan(d.p, nullptr);
  quant::Bf16DecodeParams again = d.p;
  again.planned = true;
  kernels::mla_decode_bf16(again, nullptr);
  kernels::mla_decode_bf16(again, nullptr);
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_EQ(d.out.download(), gpu_out);
  EXPECT_EQ(d.lse.download(), gpu_lse);

  const Reference ref = reference_decode(c);
  const auto m_ref = model::compare(bf16_to_f64(gpu_out), ref.out);
  EXPECT_TRUE(m_ref.nonfinite_match) << "vs reference: " << m_ref.summary();
  EXPECT_LT(m_ref.rel_l2, kRelL2Tol) << "vs reference: " << m_ref.summary();
  EXPECT_LT(m_ref.cos_diff, kCosDiffTol) << "vs reference: " << m_ref.summary();
  EXPECT_LT(lse_max_abs_diff(gpu_lse, ref.lse), kLseAbsTol);

  quant::Bf16DecodeParams twin_p = c.host_params(parts);  // same split points and tile as the GPU
  twin_p.variant = s.variant;
  quant::decode_twin_bf16(twin_p);
  const auto m_twin = model::compare(bf16_to_f64(gpu_out), bf16_to_f64(c.out));
  EXPECT_TRUE(m_twin.nonfinite_match) << "vs twin: " << m_twin.summary();
  EXPECT_LT(m_twin.rel_l2, kTwinRelL2Tol) << "vs twin: " << m_twin.summary();
  std::vector<double> twin_lse(c.lse.begin(), c.lse.end());
  EXPECT_LT(lse_max_abs_diff(gpu_lse, twin_lse), kTwinLseAbsTol);
  std::printf("[%s] vs f64: %s | vs twin: rel_l2=%.3g\n", s.name, m_ref.summary().c_str(), m_twin.rel_l2);
  if (m_ref.rel_l2 >= kRelL2Tol || !m_ref.nonfinite_match) {  // which requests / rows went wrong
    const auto g = bf16_to_f64(gpu_out);
    const size_t per_row = static_cast<size_t>(c.d_c), rows = static_cast<size_t>(c.rows());
    for (int b = 0; b < c.batch; ++b) {
      int bad = 0, first = -1;
      for (size_t r = 0; r < rows; ++r) {
        double e = 0, n = 0;
        for (size_t k = 0; k < per_row; ++k) {
          const size_t i = (b * rows + r) * per_row + k;
          e += (g[i] - ref.out[i]) * (g[i] - ref.out[i]);
          n += ref.out[i] * ref.out[i];
        }
        if (!(e <= 1e-4 * n)) { ++bad; if (first < 0) first = static_cast<int>(r); }
      }
      if (bad > 0) std::printf("  request %d (L=%d): %d of %zu rows wrong, first row %d\n", b, c.seqlens[b], bad, rows, first);
    }
  }
}

TEST(DecodeGpu, MemoryBoundShapeLengthsAndPageBoundariesUpTo64K) {
  REQUIRE_GPU();
  run_gpu_case({"H16 dc512 p64", {1, 63, 64, 65, 127, 128, 129, 4096, 65536}, 1, 16, 512, 64, 64}, 101);
}
TEST(DecodeGpu, WidestRowsAndMtpOnTheSixteenRowPath) {
  REQUIRE_GPU();
  run_gpu_case({"H16 dc512 dr128 (largest ring)", {300, 1000, 31, 32, 33}, 1, 16, 512, 128, 64}, 120);
  run_gpu_case({"sq2 H8 dc512 (16 rows)", {1, 2, 64, 65, 1000}, 2, 8, 512, 64, 64}, 121);
  run_gpu_case({"H16 dc256 many short + one long", {5, 1, 33, 70, 9, 20000, 3, 64, 65, 2, 1, 31}, 1, 16, 256, 64, 128}, 122);
}
// The parallel device scheduler must produce exactly the host schedule the twin uses.
TEST(DecodeGpu, DeviceScheduleEqualsHostSchedule) {
  REQUIRE_GPU();
  std::mt19937_64 rng(123);
  for (int trial = 0; trial < 30; ++trial) {
    const int B = trial == 0 ? 1 : 1 + static_cast<int>(rng() % 2000);  // > 512: several scan chunks
    std::vector<int32_t> L(B);
    for (auto& l : L) l = (rng() % 5 == 0) ? static_cast<int32_t>(rng() % 70000) : static_cast<int32_t>(rng() % 400);
    for (int parts : {1, 7, 132, 264}) {
      for (int tile : {32, 64}) {
        std::vector<int32_t> info(parts * quant::kPartInfoInts, -7), off(B + 1, -7);
        quant::compute_decode_schedule(L.data(), B, tile, parts, info.data(), off.data());
        DevBuf<int32_t> d_L(L), d_info(std::vector<int32_t>(info.size(), -9)), d_off(std::vector<int32_t>(off.size(), -9));
        kernels::decode_schedule_on_device(d_L.ptr, B, tile, parts, d_info.ptr, d_off.ptr, nullptr);
        cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        ASSERT_EQ(d_info.download(), info) << "B=" << B << " parts=" << parts << " tile=" << tile;
        ASSERT_EQ(d_off.download(), off) << "B=" << B << " parts=" << parts << " tile=" << tile;
      }
    }
  }
}
TEST(DecodeGpu, ManyHeadsTwoRowBlocks) {
  REQUIRE_GPU();
  run_gpu_case({"H128 dc512 p64", {1, 65, 1000, 5000}, 1, 128, 512, 64, 64}, 102);
}
// The many-head shapes on the default paths (wgmma: v6, and v7 for > 64 rows at d_c <= 256) and
// on the mma.sync 64-row path (variant 7): tails and page boundaries (NaN-poisoned page tails),
// the TPLA slice, MTP, a partial row block, 64K, page 128, single-tile parts. An earlier wgmma
// kernel failed these when run after other cases with its tensor map passed as a
// __grid_constant__ parameter (docs/gpu-notes.md, v4): the map lives in the workspace.
void wgmma_cases(int variant) {
  run_gpu_case({"wgmma H128 dc512 bounds", {1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 2000}, 1, 128, 512, 64, 64, variant}, 130);
  run_gpu_case({"wgmma H128 dc256 p64 (TPLA)", {4096, 17, 8191, 300}, 1, 128, 256, 64, 64, variant}, 131);
  run_gpu_case({"wgmma sq2 H64 dc512 (128 rows)", {1, 2, 33, 65, 3000}, 2, 64, 512, 64, 128, variant}, 132);
  run_gpu_case({"wgmma H24 dc512 dr32 (partial row block)", {90, 1, 700}, 1, 24, 512, 32, 64, variant}, 133);
  run_gpu_case({"wgmma H128 dc128", {5, 1000, 64}, 1, 128, 128, 64, 128, variant}, 134);
  run_gpu_case({"wgmma H64 dc512 64K", {65536, 7}, 1, 64, 512, 64, 64, variant}, 135);
  run_gpu_case({"wgmma H64 dc256 p128", {129, 3000, 127}, 1, 64, 256, 64, 128, variant}, 103);
  run_gpu_case({"wgmma sq2 H16 dc512", {1, 2, 64, 65, 1000}, 2, 16, 512, 64, 64, variant}, 104);
  run_gpu_case({"wgmma H128 dc512 dr64 one tile per part", {1, 2, 3}, 1, 128, 512, 64, 64, variant}, 139);
  // 128-row blocks (v7 in the default: > 64 rows at d_c <= 256): partial block, MTP, two blocks
  run_gpu_case({"wgmma H80 dc256 (partial 128-row block)", {300, 64, 1}, 1, 80, 256, 64, 64, variant}, 140);
  run_gpu_case({"wgmma sq2 H64 dc256 (128 rows, MTP)", {2, 129, 1000}, 2, 64, 256, 64, 64, variant}, 141);
  run_gpu_case({"wgmma sq2 H128 dc128 dr32 (two 128-row blocks)", {65, 700}, 2, 128, 128, 32, 128, variant}, 142);
}
TEST(DecodeGpu, WgmmaManyHeadPathDefaultV6) {
  REQUIRE_GPU();
  wgmma_cases(0);
}
// Every visible GPU, one after another in one process (the multi-GPU runner's ranks do this from
// their threads): each kernel's shared-memory limit belongs to a device, and a once-per-process flag
// let the second device's first launch of a > 48 KB kernel fail ("invalid argument", mla-bench --tp 4
// on GPU 2). One case per path with a large ring: v6 (H = 128 d_c = 512), v7 (d_c = 256, > 64 rows),
// the memory-bound path (16 rows, d_r = 128).
// v6 merges splits itself when the part count divides the batch (v6_fuses_merge), else the
// combine kernel does: both on requests of unequal lengths that part boundaries cut (1 .. 6 parts
// for 6 requests; 1, 2, 3 and 6 fuse), one row block and two.
TEST(DecodeGpu, V6FusedMergeAndCombineOnCutRequests) {
  REQUIRE_GPU();
  for (int heads : {64, 128})
    for (int parts : {1, 2, 3, 4, 5, 6}) {
      SCOPED_TRACE("heads " + std::to_string(heads) + ", parts " + std::to_string(parts));
      GpuCaseSpec s{"v6 cut requests", {3000, 64, 700, 10000, 1, 4500}, 1, heads, 512, 64, 64};
      s.parts = parts;
      run_gpu_case(s, 130 + parts + heads);
    }
}

TEST(DecodeGpu, EveryDeviceRunsTheLargeSharedMemoryPaths) {
  REQUIRE_GPU();
  int n = 0;
  cuda::check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n < 2) GTEST_SKIP() << "one GPU: the per-device limit needs two";
  struct BackToDevice0 {  // the later tests run on device 0 even if a case throws
    ~BackToDevice0() { cudaSetDevice(0); }
  } back;
  for (int dev = 0; dev < n; ++dev) {
    cuda::check(cudaSetDevice(dev), "cudaSetDevice");
    SCOPED_TRACE("device " + std::to_string(dev));
    run_gpu_case({"v6 H128 dc512", {1000, 65}, 1, 128, 512, 64, 64}, 150);
    run_gpu_case({"v7 H80 dc256", {300, 64}, 1, 80, 256, 64, 64}, 151);
    run_gpu_case({"membound H16 dc512 dr128", {300, 1000}, 1, 16, 512, 128, 64}, 152);
  }
}
TEST(DecodeGpu, ManyHeadCasesOnTheMmaSyncPathVariant7) {
  REQUIRE_GPU();
  wgmma_cases(7);
}
TEST(DecodeGpu, WgmmaBadPageIdIsFlagged) {
  REQUIRE_GPU();
  // v6 (d_c 512), v7 (d_c 256) and the mma.sync path. The bad page's tile reads as zero keys
  // (the wgmma paths' producer loads it as a zero-filled out-of-range box): the output stays finite.
  for (int d_c : {512, 256})
    for (int variant : {0, 7}) {
      DecodeCase c = make_decode_case({200, 300}, 1, 128, d_c, 64, 64, 137);
      c.page_table[2] = kSentinelPage;
      DeviceCase d(c, 4);
      d.p.variant = variant;
      kernels::mla_decode_bf16(d.p, nullptr);
      cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      EXPECT_EQ(d.flag.download()[0], 1) << "variant " << variant << " d_c " << d_c;
      for (uint16_t v : d.out.download()) ASSERT_NE(v & 0x7F80, 0x7F80) << "non-finite output, variant " << variant;
    }
}
TEST(DecodeGpu, Page128TplaSlice) {
  REQUIRE_GPU();
  run_gpu_case({"H64 dc256 p128", {129, 3000, 127}, 1, 64, 256, 64, 128}, 103);
}
TEST(DecodeGpu, MtpTwoQueryTokens) {
  REQUIRE_GPU();
  run_gpu_case({"sq2 H16 dc512", {1, 2, 64, 65, 1000}, 2, 16, 512, 64, 64}, 104);
  run_gpu_case({"sq2 H64 dc128", {2, 129, 700}, 2, 64, 128, 32, 64}, 105);
}
TEST(DecodeGpu, NarrowSlicesOfTheTinyModels) {
  REQUIRE_GPU();
  run_gpu_case({"H16 dc128", {100, 2000}, 1, 16, 128, 64, 64}, 106);
  run_gpu_case({"H8 dc64", {1, 300}, 1, 8, 64, 32, 64}, 107);
  run_gpu_case({"H5 dc32", {1, 300, 64}, 1, 5, 32, 32, 128}, 108);
  run_gpu_case({"H1 dc512", {777}, 1, 1, 512, 64, 64}, 109);
  run_gpu_case({"H20 dc32 (64-row block)", {90, 33}, 1, 20, 32, 32, 64}, 110);
}

TEST(DecodeGpu, GraphCaptureReplaysTheSameResult) {
  REQUIRE_GPU();
  DecodeCase c = make_decode_case({3000, 10, 700, 64}, 1, 16, 512, 64, 64, 111);
  DeviceCase d(c, kernels::decode_parts_for_device(c.host_params(0)));
  kernels::mla_decode_bf16(d.p, nullptr);
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const auto direct = d.out.download();
  cuda::check(cudaMemset(d.out.ptr, 0, d.out.count * sizeof(uint16_t)), "cudaMemset");
  cudaStream_t s;
  cuda::check(cudaStreamCreate(&s), "cudaStreamCreate");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  kernels::mla_decode_bf16(d.p, s);  // no host sync inside: capture must succeed
  cuda::check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cuda::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
  cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  EXPECT_EQ(d.out.download(), direct);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// One plan per decode step serves every layer: a plan made with layer A's buffers, then planned
// calls on A and on layer B (another cache, query, page table and outputs, same lengths and
// shape) through A's workspace give, bit for bit, what each unplanned call gives, on every path
// (the TMA descriptor of B's cache is B's own: a kernel parameter, not part of the plan).
TEST(DecodeGpu, PlannedCallsMatchUnplannedOnEveryPathAndCache) {
  REQUIRE_GPU();
  const std::vector<GpuCaseSpec> specs = {
      {"membound 16 rows", {700, 64, 3000}, 1, 16, 512, 64, 64},
      {"v6 128 rows", {700, 64, 3000}, 1, 128, 512, 64, 64},
      {"v7 TPLA slice", {700, 64, 3000}, 1, 128, 256, 64, 64},
      {"mma.sync variant 7", {700, 64, 3000}, 2, 32, 512, 64, 64, 7}};
  for (const GpuCaseSpec& s : specs) {
    SCOPED_TRACE(s.name);
    DecodeCase ca = make_decode_case(s.seqlens, s.s_q, s.heads, s.d_c, s.d_r, s.page_size, 121);
    DecodeCase cb = make_decode_case(s.seqlens, s.s_q, s.heads, s.d_c, s.d_r, s.page_size, 122);
    quant::Bf16DecodeParams shape = ca.host_params(0);
    shape.variant = s.variant;
    const int parts = kernels::decode_parts_for_device(shape);
    DeviceCase da(ca, parts), db(cb, parts);
    da.p.variant = db.p.variant = s.variant;
    kernels::mla_decode_bf16(da.p, nullptr);
    kernels::mla_decode_bf16(db.p, nullptr);
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const auto out_a = da.out.download(), out_b = db.out.download();
    const auto lse_a = da.lse.download(), lse_b = db.lse.download();
    ASSERT_NE(out_a, out_b);  // the two layers really differ

    EXPECT_EQ(cudaMemset(da.ws.ptr, 0xFF, da.ws.count), cudaSuccess);  // nothing left of the calls above
    for (auto* d : {&da, &db}) {
      EXPECT_EQ(cudaMemset(d->out.ptr, 0xFF, d->out.count * sizeof(uint16_t)), cudaSuccess);
      EXPECT_EQ(cudaMemset(d->lse.ptr, 0xFF, d->lse.count * sizeof(float)), cudaSuccess);
    }
    kernels::mla_decode_bf16_plan(da.p, nullptr);
    quant::Bf16DecodeParams pa = da.p, pb = db.p;
    pa.planned = pb.planned = true;
    pb.workspace = da.p.workspace;  // the step's one plan
    pb.workspace_bytes = da.p.workspace_bytes;
    kernels::mla_decode_bf16(pb, nullptr);
    kernels::mla_decode_bf16(pa, nullptr);
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    EXPECT_EQ(da.out.download(), out_a);
    EXPECT_EQ(db.out.download(), out_b);
    EXPECT_EQ(da.lse.download(), lse_a);
    EXPECT_EQ(db.lse.download(), lse_b);
    EXPECT_EQ(da.flag.download()[0], 0);
    EXPECT_EQ(db.flag.download()[0], 0);
  }
}

TEST(DecodeGpu, BadPageIdIsFlaggedAndHostChecksWorkspace) {
  REQUIRE_GPU();
  DecodeCase c = make_decode_case({200}, 1, 16, 128, 64, 64, 112);
  c.page_table[2] = kSentinelPage;  // tokens 128..199 need it
  DeviceCase d(c, 4);
  kernels::mla_decode_bf16(d.p, nullptr);
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_EQ(d.flag.download()[0], 1);
  auto p = d.p;
  p.workspace_bytes = 16;
  EXPECT_THROW(kernels::mla_decode_bf16(p, nullptr), InputError);
  p = d.p;
  p.variant = 9;  // a retired comparison variant (v4)
  EXPECT_THROW(kernels::mla_decode_bf16(p, nullptr), InputError);
}

TEST(CacheAppendGpu, BitExactWithTwin) {
  REQUIRE_GPU();
  DecodeCase c = make_decode_case({63, 130, 1}, 1, 1, 512, 64, 64, 113);
  std::set<int32_t> in_use(c.page_table.begin(), c.page_table.end());
  int32_t spare = 0;
  while (in_use.count(spare)) ++spare;
  c.page_table[1] = spare;  // request 0 grows into a fresh page
  const int dim = c.dim(), n_new = 2, B = 3;
  std::vector<uint16_t> kv_new(B * n_new * dim);
  std::mt19937_64 rng(5);
  for (auto& v : kv_new) v = static_cast<uint16_t>(rng());
  const std::vector<int32_t> pos = {63, 128, 1};
  DevBuf<uint16_t> d_new(kv_new), d_cache(c.cache);
  DevBuf<int32_t> d_pos(pos), d_table(c.page_table);
  DevBuf<int> d_flag(std::vector<int>{0});
  kernels::CacheAppendParams p;
  p.kv_new = d_new.ptr;
  p.positions = d_pos.ptr;
  p.page_table = d_table.ptr;
  p.kv_cache = d_cache.ptr;
  p.error_flag = d_flag.ptr;
  p.batch = B;
  p.n_new = n_new;
  p.dim = dim;
  p.max_pages = c.max_pages;
  p.num_pages = c.num_pages;
  p.page_size = c.page_size;
  kernels::cache_append_bf16(p, nullptr);
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  quant::cache_append_twin_bf16(kv_new.data(), B, n_new, dim, pos.data(), c.page_table.data(), c.max_pages,
                                c.cache.data(), c.num_pages, c.page_size);
  const auto gpu = d_cache.download();
  ASSERT_EQ(gpu.size(), c.cache.size());
  EXPECT_EQ(std::memcmp(gpu.data(), c.cache.data(), gpu.size() * 2), 0);
  EXPECT_EQ(d_flag.download()[0], 0);
}

// TPLA (g = 2, one rank per latent half): each rank runs the same kernel on its slice
// [x_k | k_pe] with its own softmax; ranks run one after another on one GPU and their o_proj
// partial outputs y_k = o_proj[:, heads] (W_UV[h][:, slice_k] o_lat_k[h]) are summed.
TEST(TplaGpu, SequentialRanksSumOfOProjMatchesFloat64) {
  REQUIRE_GPU();
  const int H = 8, d_c = 128, d_r = 32, d_v = 16, D = 24, g = 2, w = d_c / g;
  DecodeCase full = make_decode_case({500, 64, 1}, 1, H, d_c, d_r, 64, 114);
  std::mt19937_64 rng(9);
  std::normal_distribution<double> nd(0.0, 0.1);
  std::vector<double> w_uv(static_cast<size_t>(H) * d_v * d_c), o_proj(static_cast<size_t>(D) * H * d_v);
  for (auto& v : w_uv) v = nd(rng);
  for (auto& v : o_proj) v = nd(rng);
  std::vector<double> y_gpu(static_cast<size_t>(full.batch) * D, 0.0), y_ref(y_gpu.size(), 0.0);
  auto add_rank_output = [&](const std::vector<double>& o_lat /*[B, H, w]*/, int k, std::vector<double>& y) {
    for (int b = 0; b < full.batch; ++b)
      for (int h = 0; h < H; ++h)
        for (int v = 0; v < d_v; ++v) {
          double o = 0.0;
          for (int i = 0; i < w; ++i) o += w_uv[(static_cast<size_t>(h) * d_v + v) * d_c + k * w + i] * o_lat[(b * H + h) * w + i];
          for (int dd = 0; dd < D; ++dd) y[b * D + dd] += o_proj[static_cast<size_t>(dd) * H * d_v + h * d_v + v] * o;
        }
  };
  for (int k = 0; k < g; ++k) {
    DecodeCase rank = full;  // same pages and page table; rows narrowed to [x_k | k_pe]
    rank.d_c = w;
    const int dim = w + d_r;
    rank.cache.assign(static_cast<size_t>(full.num_pages) * full.page_size * dim, kBf16NaN);
    for (size_t t = 0; t < static_cast<size_t>(full.num_pages) * full.page_size; ++t)
      for (int i = 0; i < dim; ++i)
        rank.cache[t * dim + i] = full.cache[t * full.dim() + (i < w ? k * w + i : d_c + (i - w))];
    rank.q.resize(static_cast<size_t>(full.batch) * H * dim);
    for (size_t r = 0; r < static_cast<size_t>(full.batch) * H; ++r)
      for (int i = 0; i < dim; ++i) rank.q[r * dim + i] = full.q[r * full.dim() + (i < w ? k * w + i : d_c + (i - w))];
    rank.out.assign(static_cast<size_t>(full.batch) * H * w, kBf16NaN);
    DeviceCase d(rank, kernels::decode_parts_for_device(rank.host_params(0)));
    kernels::mla_decode_bf16(d.p, nullptr);  // rank k, after rank k-1 on the same GPU
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    add_rank_output(bf16_to_f64(d.out.download()), k, y_gpu);
    add_rank_output(reference_decode(rank).out, k, y_ref);
  }
  const auto m = model::compare(y_gpu, y_ref);
  EXPECT_LT(m.rel_l2, kRelL2Tol) << m.summary();
  EXPECT_LT(m.cos_diff, kCosDiffTol) << m.summary();
}

}  // namespace
}  // namespace mla::test
