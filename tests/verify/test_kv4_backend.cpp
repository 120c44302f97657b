// verify-decode's 4-bit backends (verify/kv4_backend.hpp) through the DecodeBackend interface:
// decode outputs vs float64 attention on the unquantised bf16 values within the named bounds
// (kKv4KernelRelL2, kKv4CosDiff), a bound that a wrong table really breaks, protected layers
// bit-identical to the BF16 backend, a poisoned token reaching only the rows that see it,
// and the per-layer parameters selected by begin_layer.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kv4_problem.hpp"
#include "verify/kv4_backend.hpp"

using namespace kv4_test;

TEST(Kv4Backend, BothFormatsWithinTheGridBoundsAndAWrongTableBreaksThem) {
  const Problem pr(21);
  const auto ref = pr.reference();
  for (const std::string f : {"fp4", "codebook"}) {
    std::vector<uint16_t> out;
    std::vector<float> lse;
    auto be = make_cpu_kv4_backend(params(f, 1));
    be->begin_layer(0);
    pr.run(*be, out, lse);
    const auto m = vs_reference(out, ref);
    std::printf("%s: rel_l2 %.4f cos_diff %.2e\n", f.c_str(), m.rel_l2, m.cos_diff);
    EXPECT_TRUE(m.nonfinite_match);
    EXPECT_LE(m.rel_l2, kKv4KernelRelL2) << f << ": " << m.summary();
    EXPECT_LE(m.cos_diff, kKv4CosDiff) << f << ": " << m.summary();
    EXPECT_GT(m.rel_l2, 1e-3) << f << ": a 4-bit cache cannot be this close (was it quantised?)";
    // Levels 4x too wide (codebook) / a c 4x too large (FP4: coarse scales, clipped groups)
    // give errors the bounds catch.
    auto bad = make_cpu_kv4_backend(params(f, 1, 4.0));
    bad->begin_layer(0);
    pr.run(*bad, out, lse);
    const auto mb = vs_reference(out, ref);
    std::printf("%s with a wrong table: rel_l2 %.4f\n", f.c_str(), mb.rel_l2);
    EXPECT_GT(mb.rel_l2, kKv4KernelRelL2) << f;
  }
}

TEST(Kv4Backend, ProtectedLayerIsTheBf16CacheBitForBit) {
  const Problem pr(22);
  auto p = params("fp4", 2);
  p.layers[1].protect_bf16 = true;
  auto be = make_cpu_kv4_backend(p);
  auto bf = make_cpu_backend();
  std::vector<uint16_t> o_kv4, o_bf16, o_l0;
  std::vector<float> l_kv4, l_bf16, l_l0;
  be->begin_layer(1);
  pr.run(*be, o_kv4, l_kv4);
  pr.run(*bf, o_bf16, l_bf16);
  EXPECT_EQ(o_kv4, o_bf16);
  EXPECT_EQ(l_kv4, l_bf16);
  be->begin_layer(0);  // layer 0 is quantised: differs
  pr.run(*be, o_l0, l_l0);
  EXPECT_NE(o_l0, o_bf16);
  EXPECT_THROW(be->begin_layer(2), InputError);
}

TEST(Kv4Backend, PoisonedTokenReachesOnlyTheRequestThatHoldsIt) {
  Problem pr(23);
  pr.kv[(size_t(0) * pr.max_len + 10) * kDim + 5] = 0x7FC0;  // NaN in request 0, token 10
  for (const std::string f : {"fp4", "codebook"}) {
    auto be = make_cpu_kv4_backend(params(f, 1));
    std::vector<uint16_t> out;
    std::vector<float> lse;
    pr.run(*be, out, lse);
    for (int h = 0; h < kH; ++h) {
      EXPECT_TRUE(std::isnan(bf16_to_float(out[(size_t(0) * kH + h) * kDc]))) << f;
      for (int i = 0; i < kDc; ++i) ASSERT_TRUE(std::isfinite(bf16_to_float(out[(size_t(1) * kH + h) * kDc + i]))) << f;
    }
  }
}

TEST(Kv4Backend, RefusesMissingParametersAndNarrowSlices) {
  EXPECT_THROW(make_cpu_kv4_backend(params("fp8", 1)), InputError);
  auto be = make_cpu_kv4_backend(params("fp4", 1));
  CacheShape s{1, 2, kP, 2, 16 + kDr};
  const int c = be->create_cache(s, {0, 1});
  be->append(c, std::vector<uint16_t>(16 + kDr, 0), 1, {0});
  std::vector<uint16_t> out, q(size_t(kH) * (16 + kDr), 0);
  std::vector<float> lse;
  try {
    be->decode(c, q, kH, 16, kDr, {1}, 0.1f, out, lse);
    FAIL() << "d_c = 16 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("d_c = 16"), std::string::npos) << e.what();
  }
}

// The backend's decode is exactly: append twin over the whole cache, fp4_cache_to_bf16 /
// codebook_cache_to_bf16 of every page, the BF16 decode twin (the contract the GPU shares).
TEST(Kv4Backend, EqualsAppendTwinThenDequantiseThenBf16Twin) {
  const Problem pr(24);
  for (const std::string f : {"fp4", "codebook"}) {
    const auto p = params(f, 1);
    auto be = make_cpu_kv4_backend(p);
    std::vector<uint16_t> out;
    std::vector<float> lse;
    pr.run(*be, out, lse);
    std::vector<uint16_t> bf(size_t(pr.num_pages) * kP * kDim);
    std::vector<uint8_t> bytes;
    const std::vector<int32_t> pos(kB, 0);
    if (f == "fp4") {
      const quant::Fp4CacheLayout l{kP, kDc, kDr};
      bytes.assign(pr.num_pages * l.page_bytes(), 0xFF);
      quant::fp4_cache_append_twin(l, p.layers[0].fp4, pr.kv.data(), kB, pr.max_len, pos.data(), pr.table.data(),
                                   pr.max_pages, bytes.data(), pr.num_pages);
      quant::fp4_cache_to_bf16(l, bytes.data(), pr.num_pages, bf.data());
    } else {
      const quant::CodebookCacheLayout l{kP, kDc, kDr};
      bytes.assign(pr.num_pages * l.page_bytes(), 0xFF);
      quant::codebook_cache_append_twin(l, p.layers[0].codebook, pr.kv.data(), kB, pr.max_len, pos.data(),
                                        pr.table.data(), pr.max_pages, bytes.data(), pr.num_pages);
      quant::codebook_cache_to_bf16(l, p.layers[0].codebook, bytes.data(), pr.num_pages, bf.data());
    }
    std::vector<uint16_t> o2(out.size());
    std::vector<float> l2(lse.size());
    quant::Bf16DecodeParams d = decode_params(CacheShape{kB, pr.num_pages, kP, pr.max_pages, kDim}, kH, kDc, kDr, pr.scale);
    d.q = pr.q.data();
    d.kv_cache = bf.data();
    d.page_table = pr.table.data();
    d.seqlens = pr.seqlens.data();
    d.out = o2.data();
    d.lse = l2.data();
    quant::decode_twin_bf16(d);
    EXPECT_EQ(out, o2) << f;
    EXPECT_EQ(lse, l2) << f;
  }
}
