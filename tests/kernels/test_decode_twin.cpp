// CPU twin of the BF16 decode kernel (runs in CI): schedule invariants, agreement with the
// float64 reference on adversarial paged layouts, input checks, cache append.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/error.hpp"
#include "decode_case.hpp"

namespace mla::test {
namespace {

using quant::compute_decode_schedule;
using quant::decode_tiles;
using quant::kPartInfoInts;

// Every (request, tile) is covered exactly once, in order; split numbering matches offsets.
void check_schedule(const std::vector<int32_t>& seqlens, int tile, int parts) {
  const int B = static_cast<int>(seqlens.size());
  std::vector<int32_t> info(parts * kPartInfoInts), off(B + 1);
  compute_decode_schedule(seqlens.data(), B, tile, parts, info.data(), off.data());
  std::vector<std::vector<int>> covered(B);
  std::vector<int> splits_seen(B, 0);
  int expect_split = 0;
  for (int p = 0; p < parts; ++p) {
    const int32_t* in = info.data() + p * kPartInfoInts;
    ASSERT_EQ(in[4], expect_split) << "part " << p;
    int b = in[0], t = in[1];
    while (b < in[2] || (b == in[2] && t < in[3])) {
      const int stop = (b == in[2]) ? in[3] : decode_tiles(seqlens[b], tile);
      ASSERT_LT(t, stop) << "empty segment in part " << p;
      EXPECT_EQ(expect_split, off[b] + splits_seen[b]) << "split numbering, request " << b;
      for (int i = t; i < stop; ++i) covered[b].push_back(i);
      ++splits_seen[b];
      ++expect_split;
      ++b;
      t = 0;
    }
  }
  EXPECT_EQ(off[B], expect_split);
  EXPECT_LE(off[B], quant::decode_max_splits(B, parts));
  for (int b = 0; b < B; ++b) {
    EXPECT_EQ(splits_seen[b], off[b + 1] - off[b]) << "request " << b;
    const int n = decode_tiles(seqlens[b], tile);
    ASSERT_EQ(static_cast<int>(covered[b].size()), n) << "request " << b << " L=" << seqlens[b];
    for (int i = 0; i < n; ++i) EXPECT_EQ(covered[b][i], i) << "request " << b;
  }
}

TEST(DecodeSchedule, CoversEveryTileOnceAndBalances) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int B = 1 + static_cast<int>(rng() % 200);
    std::vector<int32_t> L(B);
    for (auto& l : L) l = (rng() % 4 == 0) ? static_cast<int32_t>(rng() % 70000) : static_cast<int32_t>(rng() % 300);
    for (int parts : {1, 2, 7, 66, 132}) check_schedule(L, 64, parts);
  }
  check_schedule({0}, 32, 132);
  check_schedule({1, 1, 1}, 64, 1);
}

TEST(DecodeSchedule, LongRequestIsSplitShortOnesAreNot) {
  std::vector<int32_t> L(8, 64);
  L[3] = 64 * 1000;
  std::vector<int32_t> info(16 * kPartInfoInts), off(9);
  compute_decode_schedule(L.data(), 8, 64, 16, info.data(), off.data());
  EXPECT_GE(off[4] - off[3], 12);  // the long request is spread over most parts
  int max_tiles = 0;               // and no part does much more than its share
  for (int p = 0; p < 16; ++p) {
    const int32_t* in = info.data() + p * kPartInfoInts;
    int tiles = 0, b = in[0], t = in[1];
    while (b < in[2] || (b == in[2] && t < in[3])) {
      const int stop = (b == in[2]) ? in[3] : decode_tiles(L[b], 64);
      tiles += stop - t;
      ++b;
      t = 0;
    }
    max_tiles = std::max(max_tiles, tiles);
  }
  EXPECT_LE(max_tiles, (1000 + 7) / 16 + 2 * quant::kFixedCost + 2);
}

// Default parts fitted to the batch: a multiple of it when that keeps >= 90% of the slots busy,
// else every slot.
TEST(DecodeSchedule, BalancedPartsFitTheBatch) {
  using quant::decode_balanced_parts;
  EXPECT_EQ(decode_balanced_parts(132, 128), 128);  // B = 128 on 132 SMs: one part per request
  EXPECT_EQ(decode_balanced_parts(132, 64), 128);   // two per request
  EXPECT_EQ(decode_balanced_parts(132, 120), 120);
  EXPECT_EQ(decode_balanced_parts(132, 44), 132);   // 3 x 44
  EXPECT_EQ(decode_balanced_parts(132, 100), 132);  // 100 would idle 24% of the SMs
  EXPECT_EQ(decode_balanced_parts(132, 45), 132);   // 90 likewise
  EXPECT_EQ(decode_balanced_parts(132, 1), 132);
  EXPECT_EQ(decode_balanced_parts(264, 128), 256);  // two CTAs per SM
  EXPECT_EQ(decode_balanced_parts(66, 128), 64);    // up to twice the slots: two requests a part
  EXPECT_EQ(decode_balanced_parts(33, 128), 33);    // more than twice: every slot
  EXPECT_EQ(decode_balanced_parts(66, 127), 66);    // odd: every slot
  EXPECT_EQ(decode_balanced_parts(132, 250), 125);
  EXPECT_EQ(decode_balanced_parts(132, 200), 132);  // 100 would idle 24% of the SMs
  EXPECT_EQ(decode_balanced_parts(132, 131), 131);  // a prime: one part per request, one SM idle
  EXPECT_EQ(decode_balanced_parts(132, 0), 132);
  EXPECT_EQ(decode_balanced_parts(0, 5), 1);
  for (int slots : {1, 7, 33, 66, 132, 264})
    for (int batch = 1; batch <= 600; ++batch) {
      const int parts = decode_balanced_parts(slots, batch);
      ASSERT_GE(parts, 1);
      if (parts < slots) {
        ASSERT_TRUE(parts % batch == 0 || 2 * parts == batch) << "slots " << slots << " batch " << batch;
      }
      ASSERT_LE(parts, slots) << "slots " << slots << " batch " << batch;
      ASSERT_GE(10 * parts, 9 * slots) << "slots " << slots << " batch " << batch;
    }
}

// With those parts, equal-length requests are all cut alike: the same split count each, at most
// parts / batch. The default before (all 132 slots) cut most requests of B = 128 in two.
TEST(DecodeSchedule, BalancedPartsCutNoRequest) {
  for (int batch : {8, 16, 64, 120, 128})
    for (int tiles : {4, 60, 124, 508}) {  // n + kFixedCost divisible by 2, 4 and 8
      const int parts = quant::decode_balanced_parts(132, batch);
      const std::vector<int32_t> L(batch, tiles * 64);
      std::vector<int32_t> info(parts * kPartInfoInts), off(batch + 1);
      compute_decode_schedule(L.data(), batch, 64, parts, info.data(), off.data());
      ASSERT_EQ(parts % batch, 0) << "batch " << batch;
      const int per = parts / batch;
      for (int b = 0; b < batch; ++b) {
        ASSERT_EQ(off[b + 1] - off[b], off[1] - off[0]) << "batch " << batch << " tiles " << tiles << " request " << b;
        ASSERT_LE(off[b + 1] - off[b], per) << "batch " << batch << " tiles " << tiles << " request " << b;
      }
      check_schedule(L, 64, parts);
    }
  std::vector<int32_t> info(132 * kPartInfoInts), off(129);
  const std::vector<int32_t> L(128, 8192);
  compute_decode_schedule(L.data(), 128, 64, 132, info.data(), off.data());
  EXPECT_GT(off[128], 200);  // the old default: most of the 128 requests in two splits
}

// The workspace layout the kernels carve and decode_workspace_bytes counts: the schedule first,
// the merge counters, then 256-byte-aligned LSE and partial-output arrays large enough for
// the worst case of splits (every part boundary cutting a request).
TEST(DecodeWorkspace, LayoutIsOrderedAlignedAndLargeEnough) {
  for (int batch : {1, 7, 128, 1000})
    for (int parts : {1, 66, 132, 264})
      for (int heads : {1, 16, 128}) {
        const int s_q = 2, d_c = 512;
        const quant::DecodeWorkspaceLayout l = quant::decode_workspace_layout(batch, s_q, heads, d_c, parts);
        const size_t rows = static_cast<size_t>(s_q) * heads;
        const size_t splits = quant::decode_max_splits(batch, parts);
        EXPECT_EQ(l.info, 0u);
        EXPECT_EQ(l.offsets, l.info + static_cast<size_t>(parts) * kPartInfoInts * sizeof(int32_t));
        EXPECT_EQ(l.cnt, l.offsets + (static_cast<size_t>(batch) + 1) * sizeof(int32_t));
        EXPECT_GE(l.lse, l.cnt + static_cast<size_t>(batch) * ((rows + 63) / 64) * sizeof(int32_t));
        EXPECT_EQ(l.lse % 256, 0u);
        EXPECT_GE(l.o, l.lse + splits * rows * sizeof(float));
        EXPECT_EQ(l.o % 256, 0u);
        EXPECT_EQ(l.total, l.o + splits * rows * d_c * sizeof(float));
        EXPECT_EQ(quant::decode_workspace_bytes(batch, s_q, heads, d_c, parts), l.total);
      }
}

struct TwinCaseSpec {
  std::vector<int32_t> seqlens;
  int s_q, heads, d_c, d_r, page_size, parts;
};

void run_twin_vs_reference(const TwinCaseSpec& s, uint64_t seed) {
  DecodeCase c = make_decode_case(s.seqlens, s.s_q, s.heads, s.d_c, s.d_r, s.page_size, seed);
  quant::decode_twin_bf16(c.host_params(s.parts));
  const Reference ref = reference_decode(c);
  const auto m = model::compare(bf16_to_f64(c.out), ref.out);
  SCOPED_TRACE(m.summary());
  EXPECT_TRUE(m.nonfinite_match);
  EXPECT_LT(m.rel_l2, kRelL2Tol);
  EXPECT_LT(m.cos_diff, kCosDiffTol);
  EXPECT_LT(lse_max_abs_diff(c.lse, ref.lse), kLseAbsTol);
}

TEST(DecodeTwin, MatchesReferenceMemoryBoundShapePageBoundaries) {
  // Lengths 1, page boundary +-1 (page 64), several splits per request (8 parts).
  run_twin_vs_reference({{1, 63, 64, 65, 127, 128, 129, 700}, 1, 16, 512, 64, 64, 8}, 1);
}

TEST(DecodeTwin, MatchesReferenceManyHeadsPage128) {
  run_twin_vs_reference({{127, 128, 129, 300}, 1, 128, 64, 32, 128, 5}, 2);
}

TEST(DecodeTwin, MatchesReferenceMtpTwoQueryTokens) {
  // s_q = 2: the first query token sees one key fewer; L = 1 leaves it with none (0, -inf).
  run_twin_vs_reference({{1, 2, 64, 65, 200}, 2, 8, 128, 64, 64, 4}, 3);
  DecodeCase c = make_decode_case({1}, 2, 4, 32, 32, 64, 4);
  quant::decode_twin_bf16(c.host_params(3));
  for (int h = 0; h < 4; ++h) {
    EXPECT_TRUE(std::isinf(c.lse[h]) && c.lse[h] < 0) << "head " << h;
    for (int i = 0; i < 32; ++i) EXPECT_EQ(c.out[h * 32 + i], 0) << "head " << h;
    EXPECT_TRUE(std::isfinite(c.lse[4 + h]));
  }
}

TEST(DecodeTwin, MatchesReferenceNarrowTplaSlicesOddHeads) {
  run_twin_vs_reference({{5, 64, 190}, 1, 3, 32, 32, 64, 2}, 5);
  run_twin_vs_reference({{33, 250}, 1, 20, 64, 64, 64, 3}, 6);
  run_twin_vs_reference({{400}, 1, 2, 256, 64, 128, 4}, 7);
}

TEST(DecodeTwin, SplitCountChangesOnlyRounding) {
  DecodeCase a = make_decode_case({2000, 30}, 1, 16, 128, 64, 64, 8);
  DecodeCase b = a;
  quant::decode_twin_bf16(a.host_params(1));
  quant::decode_twin_bf16(b.host_params(40));
  const auto m = model::compare(bf16_to_f64(a.out), bf16_to_f64(b.out));
  EXPECT_LT(m.rel_l2, kTwinRelL2Tol) << m.summary();
  EXPECT_GT(m.rel_l2, 0.0) << "40 splits and 1 split should round differently somewhere";
}

TEST(DecodeTwin, RejectsBadParamsNamingTheField) {
  DecodeCase c = make_decode_case({10}, 1, 4, 64, 32, 64, 9);
  auto p = c.host_params(2);
  p.d_c = 100;
  try {
    quant::decode_twin_bf16(p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("d_c = 100"), std::string::npos) << e.what();
  }
  p = c.host_params(2);
  p.page_size = 96;
  EXPECT_THROW(quant::decode_twin_bf16(p), InputError);
  p = c.host_params(2);
  p.s_q = 3;
  EXPECT_THROW(quant::decode_twin_bf16(p), InputError);
  p = c.host_params(2);
  p.scale = std::nanf("");
  EXPECT_THROW(quant::decode_twin_bf16(p), InputError);
  p = c.host_params(70000);  // more parts than a grid dimension holds
  try {
    quant::decode_twin_bf16(p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_parts = 70000"), std::string::npos) << e.what();
  }
}

TEST(DecodeTwin, SentinelPageForANeededTokenIsAnInputError) {
  DecodeCase c = make_decode_case({100}, 1, 4, 64, 32, 64, 10);
  c.page_table[1] = kSentinelPage;  // tokens 64..99 now point nowhere
  try {
    quant::decode_twin_bf16(c.host_params(2));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("page_table[0][1]"), std::string::npos) << e.what();
  }
}

TEST(CacheAppendTwin, WritesTokensIntoTheirPages) {
  DecodeCase c = make_decode_case({63, 130}, 1, 1, 64, 32, 64, 11);
  const int dim = c.dim(), n_new = 3;
  // Request 0 gets pages for positions 63..65 (its page table's second entry was a sentinel).
  std::set<int32_t> in_use(c.page_table.begin(), c.page_table.end());
  int32_t spare = 0;
  while (in_use.count(spare)) ++spare;
  c.page_table[1] = spare;
  std::vector<uint16_t> kv_new(2 * n_new * dim);
  for (size_t i = 0; i < kv_new.size(); ++i) kv_new[i] = static_cast<uint16_t>(0x3F80 + i % 97);
  std::vector<int32_t> pos = {63, 127};
  // request 1 spans positions 127..129: its pages 1 and 2 already exist
  quant::cache_append_twin_bf16(kv_new.data(), 2, n_new, dim, pos.data(), c.page_table.data(), c.max_pages,
                                c.cache.data(), c.num_pages, c.page_size);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < n_new; ++i) {
      const uint16_t* row = c.token(b, pos[b] + i);
      for (int k = 0; k < dim; ++k) ASSERT_EQ(row[k], kv_new[(b * n_new + i) * dim + k]) << b << " " << i << " " << k;
    }
  pos = {64 * c.max_pages, 0};  // past the page table
  EXPECT_THROW(quant::cache_append_twin_bf16(kv_new.data(), 2, n_new, dim, pos.data(), c.page_table.data(),
                                             c.max_pages, c.cache.data(), c.num_pages, c.page_size),
               InputError);
}

}  // namespace
}  // namespace mla::test
