// GPU tests of the 4-bit cache decode (label gpu; skipped without a device). The 4-bit kernel
// dequantises each tile to BF16 and hands it to the memory-bound BF16 path's consumer code, so
// its output must equal, bit for bit, mla_decode_bf16's on the dequantised BF16 cache with the
// same num_parts. The pages are packed here from the byte layout of docs/formats/kv-fp4.md and
// dequantised here from the format's definition (FP4: e2m1 * 2^(b - 127); codebook:
// BF16_RNE(level * scale) in fp32), independently of lib/quant, so a layout or dequantisation
// slip in the kernel cannot hide behind shared code. Cases: heads 1..16, s_q 1-2, d_c 128/256/
// 512, d_r 32/64, pages 64/128, lengths 1, page edges and 64K, unused page slots poisoned with
// 0xFF bytes (FP4 scale NaN, codes -6), sentinel page-table entries, a poisoned token, scale
// bytes at the extremes (0: 2^-127 subnormal products; 254: overflow to inf), both formats.
// The append kernel against the CPU twins (lib/quant), every byte; and decoding GPU-appended
// pages against the CPU twin (lib/quant's dequantisation + the BF16 decode twin).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/gpu.hpp"
#include "core/dtype.hpp"
#include "decode_case.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/fp8_decode.hpp"
#include "kernels/kv4_append.hpp"
#include "kernels/kv4_decode.hpp"
#include "kernels/mla_decode.hpp"
#include "model/metrics.hpp"
#include "quant/codebook_cache_format.hpp"
#include "quant/fp4_cache_format.hpp"
#include "quant/fp4_to_fp8.hpp"

namespace mla::test {
namespace {

template <class T>
using Dev = cuda::DeviceBuffer<T>;
using kernels::Kv4Format;

// Offset inside a column block of width w of byte i of in-page token t (docs/formats/kv-fp4.md:
// the FP8 layout's 16-byte chunk swizzle for blocks of >= 32 bytes).
size_t block_offset(int t, int i, int w) {
  const uint32_t a = static_cast<uint32_t>(t * w + i);
  return w >= 32 ? a ^ (((a >> 7) & static_cast<uint32_t>(w / 16 - 1)) << 4) : a;
}

// A section of P rows of `row` bytes: byte i of token t.
size_t section_byte(int P, int row, int t, int i) {
  const int w = std::min(row, 128);
  return static_cast<size_t>(i / w) * P * w + block_offset(t, i % w, w);
}

struct Kv4Case {
  DecodeCase bf;             // shape, query, page table; bf.cache becomes the dequantised cache
  Kv4Format format;
  std::vector<uint8_t> pages;  // the 4-bit pages
  float levels[16] = {};
  size_t page_bytes = 0;
};

// Random 4-bit tokens in every slot of every page (unused slots: 0xFF bytes), the dequantised
// BF16 cache alongside. scale_lo/hi: the FP4 scale bytes drawn; poison: (page, slot) stored as a
// poisoned token (scale NaN).
Kv4Case make_case(Kv4Format f, const std::vector<int32_t>& seqlens, int s_q, int heads, int d_c, int d_r, int page,
                  uint64_t seed, int scale_lo = 118, int scale_hi = 134, bool poison_one = false) {
  Kv4Case c;
  c.format = f;
  c.bf = make_decode_case(seqlens, s_q, heads, d_c, d_r, page, seed);
  const int P = page, dim = d_c + d_r;
  const int code_row = d_c / 2, scale_row = f == Kv4Format::Fp4 ? d_c / 32 : 4, rope_row = 2 * d_r;
  c.page_bytes = static_cast<size_t>(P) * (code_row + scale_row + rope_row);
  c.pages.assign(c.page_bytes * c.bf.num_pages, 0xFF);
  std::mt19937_64 rng(seed ^ 0x4B56ull);
  std::uniform_int_distribution<int> byte(0, 255), sbyte(scale_lo, scale_hi);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> pos(0.05f, 0.4f);
  std::vector<float> lv(16);
  for (auto& v : lv) v = 2.5f * normal(rng);
  std::sort(lv.begin(), lv.end());
  std::copy(lv.begin(), lv.end(), c.levels);
  // Which slots hold a request's token (the others keep the 0xFF poison).
  std::vector<char> used(static_cast<size_t>(c.bf.num_pages) * P, 0);
  for (int b = 0; b < c.bf.batch; ++b)
    for (int j = 0; j < seqlens[b]; ++j) used[static_cast<size_t>(c.bf.page_table[b * c.bf.max_pages + j / P]) * P + j % P] = 1;
  bool poisoned = !poison_one;
  for (int pg = 0; pg < c.bf.num_pages; ++pg) {
    uint8_t* base = c.pages.data() + c.page_bytes * pg;
    uint8_t* codes = base;
    uint8_t* scales = base + static_cast<size_t>(P) * code_row;
    uint8_t* rope = scales + static_cast<size_t>(P) * scale_row;
    for (int t = 0; t < P; ++t) {
      uint16_t* row = c.bf.cache.data() + (static_cast<size_t>(pg) * P + t) * dim;
      if (!used[static_cast<size_t>(pg) * P + t]) {
        for (int i = 0; i < dim; ++i) row[i] = kBf16NaN;  // never read: the kernels zero such rows
        continue;
      }
      const bool poison = !poisoned;
      poisoned = true;
      std::vector<uint8_t> cb(code_row), sb(scale_row);
      for (auto& v : cb) v = poison ? 0 : static_cast<uint8_t>(byte(rng));
      float tok_scale = pos(rng);
      if (f == Kv4Format::Fp4) {
        for (auto& v : sb) v = poison ? 0xFF : static_cast<uint8_t>(sbyte(rng));
      } else {
        if (poison) tok_scale = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(sb.data(), &tok_scale, 4);
      }
      for (int i = 0; i < code_row; ++i) codes[section_byte(P, code_row, t, i)] = cb[i];
      for (int i = 0; i < scale_row; ++i) scales[section_byte(P, scale_row, t, i)] = sb[i];
      for (int i = 0; i < d_r; ++i) {
        const uint16_t r = poison ? 0 : float_to_bf16(normal(rng));
        rope[section_byte(P, rope_row, t, 2 * i)] = static_cast<uint8_t>(r & 0xFF);
        rope[section_byte(P, rope_row, t, 2 * i + 1)] = static_cast<uint8_t>(r >> 8);
        row[d_c + i] = r;
      }
      for (int i = 0; i < d_c; ++i) {
        const uint8_t code = (i % 2) ? cb[i / 2] >> 4 : cb[i / 2] & 0xF;
        float v;
        if (f == Kv4Format::Fp4) {
          const uint8_t s = sb[i / 32];
          const float scale = s == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, s == 0 ? -127 : s - 127);
          v = e2m1_to_float(code) * scale;
        } else {
          v = c.levels[code] * tok_scale;
        }
        row[i] = float_to_bf16(v);
      }
    }
  }
  return c;
}

struct Result {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  int flag = 0;
};

// kv4 = true: the 4-bit decode on c.pages; false: the BF16 decode on the dequantised cache.
Result run(Kv4Case& c, bool kv4, int parts) {
  DecodeCase& b = c.bf;
  Dev<uint16_t> q(b.q), out(b.out.size());
  Dev<int32_t> table(b.page_table), seqlens(b.seqlens);
  Dev<float> lse(b.lse.size());
  Dev<int> flag(std::vector<int>{0});
  Dev<uint8_t> pages(c.pages);
  Dev<uint16_t> cache(b.cache);
  quant::Bf16DecodeParams p = b.host_params(parts);
  p.q = q.ptr;
  p.kv_cache = kv4 ? reinterpret_cast<const uint16_t*>(pages.ptr) : cache.ptr;
  p.page_table = table.ptr;
  p.seqlens = seqlens.ptr;
  p.out = out.ptr;
  p.lse = lse.ptr;
  p.error_flag = flag.ptr;
  kernels::Kv4DecodeParams kp;
  kp.base = p;
  kp.format = c.format;
  std::copy(c.levels, c.levels + 16, kp.levels);
  Dev<char> ws(kv4 ? kernels::kv4_decode_workspace_bytes_for(kp) : kernels::decode_workspace_bytes_for(p));
  kp.base.workspace = p.workspace = ws.ptr;
  kp.base.workspace_bytes = p.workspace_bytes = ws.count;
  if (kv4)
    kernels::mla_decode_kv4(kp, nullptr);
  else
    kernels::mla_decode_bf16(p, nullptr);
  cuda::check(cudaDeviceSynchronize(), "decode");
  Result r;
  out.download(r.out);
  lse.download(r.lse);
  r.flag = flag.download()[0];
  return r;
}

// Bitwise equality of the 4-bit decode and the BF16 decode of the dequantised cache.
void expect_same_as_bf16(Kv4Case& c, int parts = 0) {
  if (parts == 0) parts = quant::decode_default_parts(cuda::sm_count(), c.bf.host_params(0));
  const Result a = run(c, true, parts), b = run(c, false, parts);
  ASSERT_EQ(a.out.size(), b.out.size());
  size_t diff = 0, first = a.out.size();
  for (size_t i = 0; i < a.out.size(); ++i)
    if (a.out[i] != b.out[i]) {
      ++diff;
      first = std::min(first, i);
    }
  EXPECT_EQ(diff, 0u) << "outputs differ at " << diff << " of " << a.out.size() << " elements, first at " << first
                      << " (kv4 " << (first < a.out.size() ? a.out[first] : 0) << " vs bf16 "
                      << (first < b.out.size() ? b.out[first] : 0) << ")";
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "LSE differs";
  EXPECT_EQ(a.flag, 0);
  // The dequantised decode must itself be a real decode: finite where no poisoned token is seen
  // (at most one request in a case holds one).
  size_t finite = 0;
  for (uint16_t v : a.out) finite += std::isfinite(bf16_to_float(v)) ? 1 : 0;
  EXPECT_GE(finite, a.out.size() / 2) << "most outputs should be finite";
}

TEST(Kv4DecodeGpu, Fp4MatchesBf16DecodeOfDequantisedCache) {
  REQUIRE_GPU();
  for (int heads : {1, 4, 16}) {
    auto c = make_case(Kv4Format::Fp4, {1, 63, 64, 65, 300, 1000}, 1, heads, 512, 64, 64, 11 + heads);
    SCOPED_TRACE("heads " + std::to_string(heads));
    expect_same_as_bf16(c);
  }
}

TEST(Kv4DecodeGpu, CodebookMatchesBf16DecodeOfDequantisedCache) {
  REQUIRE_GPU();
  for (int heads : {2, 16}) {
    auto c = make_case(Kv4Format::Codebook, {1, 64, 129, 700}, 1, heads, 512, 64, 64, 21 + heads);
    SCOPED_TRACE("heads " + std::to_string(heads));
    expect_same_as_bf16(c);
  }
}

TEST(Kv4DecodeGpu, MtpSlicesPagesAndRopeWidths) {
  REQUIRE_GPU();
  struct Shape {
    int s_q, heads, d_c, d_r, page;
  };
  for (const Shape s : {Shape{2, 8, 512, 64, 64}, Shape{1, 16, 256, 64, 64}, Shape{2, 4, 128, 64, 128},
                        Shape{1, 16, 512, 32, 128}, Shape{1, 8, 64, 32, 64}}) {
    for (Kv4Format f : {Kv4Format::Fp4, Kv4Format::Codebook}) {
      auto c = make_case(f, {2, 127, 128, 129, 511}, s.s_q, s.heads, s.d_c, s.d_r, s.page, 31 + s.d_c + s.heads);
      SCOPED_TRACE("s_q " + std::to_string(s.s_q) + " heads " + std::to_string(s.heads) + " d_c " +
                   std::to_string(s.d_c) + " d_r " + std::to_string(s.d_r) + " page " + std::to_string(s.page) +
                   (f == Kv4Format::Fp4 ? " fp4" : " codebook"));
      expect_same_as_bf16(c);
    }
  }
}

TEST(Kv4DecodeGpu, LongRequestAndSeveralSplits) {
  REQUIRE_GPU();
  auto c = make_case(Kv4Format::Fp4, {65536, 33, 4096}, 1, 16, 512, 64, 64, 41);
  expect_same_as_bf16(c);
  expect_same_as_bf16(c, 7);  // few parts: long runs per CTA crossing requests
}

TEST(Kv4DecodeGpu, PoisonedTokenAndExtremeScales) {
  REQUIRE_GPU();
  for (Kv4Format f : {Kv4Format::Fp4, Kv4Format::Codebook}) {
    auto c = make_case(f, {90, 200}, 1, 16, 512, 64, 64, 51, 118, 134, true);
    SCOPED_TRACE(f == Kv4Format::Fp4 ? "fp4" : "codebook");
    const Result r = run(c, true, 0);
    // The poisoned token is the first used slot of request 0: its rows are NaN, request 1's finite.
    const size_t per_req = static_cast<size_t>(c.bf.rows()) * c.bf.d_c;
    EXPECT_TRUE(std::isnan(bf16_to_float(r.out[0])));
    for (size_t i = per_req; i < 2 * per_req; ++i) ASSERT_TRUE(std::isfinite(bf16_to_float(r.out[i]))) << i;
    expect_same_as_bf16(c);
  }
  // Scale bytes 0 (products 2^-128 .. 6 * 2^-127: bf16 subnormals) through 3, and 250 .. 254
  // (products up to 6 * 2^127: inf), in separate requests' pages.
  auto lo = make_case(Kv4Format::Fp4, {70, 130}, 1, 8, 512, 64, 64, 61, 0, 3);
  expect_same_as_bf16(lo);
  auto hi = make_case(Kv4Format::Fp4, {70}, 1, 8, 512, 64, 64, 62, 250, 254);
  const Result a = run(hi, true, 0), b = run(hi, false, 0);
  EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0);
}

TEST(Kv4DecodeGpu, BadPageIdIsFlaggedAndRefusedShapesNameTheField) {
  REQUIRE_GPU();
  auto c = make_case(Kv4Format::Fp4, {100}, 1, 4, 512, 64, 64, 71);
  c.bf.page_table[1] = c.bf.num_pages + 5;  // the second page of request 0: out of range
  const Result r = run(c, true, 0);
  EXPECT_EQ(r.flag, 1);
  DecodeCase odd = make_decode_case({64}, 1, 16, 512, 48, 64, 72);
  kernels::Kv4DecodeParams kp;
  kp.base = odd.host_params(0);
  try {
    kernels::mla_decode_kv4(kp, nullptr);
    FAIL() << "d_r = 48 (96 bytes of RoPE) must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("d_r = 48"), std::string::npos) << e.what();
  }
  kp.base = c.bf.host_params(0);  // a valid shape, but the 4-bit path has no plan entry
  kp.base.planned = true;
  try {
    kernels::mla_decode_kv4(kp, nullptr);
    FAIL() << "planned = true must be refused by the 4-bit path";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("planned = true"), std::string::npos) << e.what();
  }
}

// More than 16 query rows: blocks of 16 rows, each CTA decoding its block from the 4-bit pages
// (functional for every head count). Against the CPU twin on the dequantised cache (its split
// points and running-max rule follow the BF16 wgmma path for the shape: 64-token tiles and the
// max slack, where these blocks keep 32-token tiles and the exact max; hence the GPU-vs-twin
// bounds of decode_case.hpp) and against float64 on those values.
TEST(Kv4DecodeGpu, ManyRowsMatchTheTwin) {
  REQUIRE_GPU();
  struct Shape {
    int s_q, heads, d_c;
  };
  for (const Shape sh : {Shape{2, 16, 512}, Shape{1, 64, 512}, Shape{2, 64, 512}, Shape{1, 128, 256}, Shape{1, 20, 512}}) {
    for (Kv4Format f : {Kv4Format::Fp4, Kv4Format::Codebook}) {
      SCOPED_TRACE("s_q " + std::to_string(sh.s_q) + " heads " + std::to_string(sh.heads) + " d_c " +
                   std::to_string(sh.d_c) + (f == Kv4Format::Fp4 ? " fp4" : " codebook"));
      // Scale bytes 124..127 keep |values| <= 6 and logits O(1), where the twin's LSE bound (1e-4
      // absolute, fp32 summation order) applies; at 118..134 the logits reach ~50 and the other
      // summation order of the > 16-row twin moves the LSE by ~4e-4 (first GPU run).
      auto c = make_case(f, {1, 63, 200, 700}, sh.s_q, sh.heads, sh.d_c, 64, 64, 111 + sh.heads + sh.d_c, 124, 127);
      const Result gpu = run(c, true, 0);
      EXPECT_EQ(gpu.flag, 0);
      const Reference ref = reference_decode(c.bf);
      const auto m_ref = model::compare(bf16_to_f64(gpu.out), ref.out);
      EXPECT_TRUE(m_ref.nonfinite_match) << "vs float64: " << m_ref.summary();
      EXPECT_LT(m_ref.rel_l2, 8e-3) << "vs float64: " << m_ref.summary();  // SPEC section 5's BF16 bound
      quant::decode_twin_bf16(c.bf.host_params(0));
      const auto m = model::compare(bf16_to_f64(gpu.out), bf16_to_f64(c.bf.out));
      EXPECT_TRUE(m.nonfinite_match) << "vs twin: " << m.summary();
      EXPECT_LT(m.rel_l2, kTwinRelL2Tol) << "vs twin: " << m.summary();
      std::vector<double> twin_lse(c.bf.lse.begin(), c.bf.lse.end());
      EXPECT_LT(lse_max_abs_diff(gpu.lse, twin_lse), kTwinLseAbsTol);
    }
  }
}

// ---- append: every byte equal to the CPU twin's ----

// kv_new rows of mixed magnitude (1e-3 .. 1e3 per row, a few exact zeros and ties of the E2M1
// grid) with some non-finite tokens, appended at positions that cross page edges.
struct AppendCase {
  int batch, n_new, d_c, d_r, page, max_pages, num_pages;
  std::vector<uint16_t> kv;
  std::vector<int32_t> positions, table;
};

AppendCase make_append_case(int batch, int n_new, int d_c, int d_r, int page, uint64_t seed) {
  AppendCase a{batch, n_new, d_c, d_r, page, 0, 0, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> mag(-3, 3), pos(0, 3 * page);
  a.kv.resize(static_cast<size_t>(batch) * n_new * (d_c + d_r));
  for (int r = 0; r < batch * n_new; ++r) {
    const float m = std::pow(10.f, static_cast<float>(mag(rng)));
    for (int k = 0; k < d_c + d_r; ++k) {
      float v = m * normal(rng);
      if (k % 97 == 5) v = 0.f;
      if (k % 89 == 7) v = m * 0.25f;  // E2M1 ties after scaling, now and then
      a.kv[static_cast<size_t>(r) * (d_c + d_r) + k] = float_to_bf16(v);
    }
  }
  a.kv[static_cast<size_t>(1) * (d_c + d_r) + 3] = kBf16NaN;                        // poisoned latent
  a.kv[static_cast<size_t>(2) * (d_c + d_r) + d_c + 1] = 0x7F80;                  // poisoned rope (+inf)
  for (int k = 0; k < d_c + d_r; ++k) a.kv[static_cast<size_t>(3) * (d_c + d_r) + k] = 0;  // all zero
  a.max_pages = (3 * page + n_new) / page + 2;
  a.num_pages = batch * a.max_pages;
  for (int b = 0; b < batch; ++b) a.positions.push_back(pos(rng));
  a.table.resize(static_cast<size_t>(batch) * a.max_pages);  // a permutation: no slot written twice
  std::iota(a.table.begin(), a.table.end(), 0);
  std::shuffle(a.table.begin(), a.table.end(), rng);
  return a;
}

std::vector<uint8_t> gpu_append(const AppendCase& a, Kv4Format f, const quant::CodebookTable& t, float c,
                                size_t page_bytes, int* flag_out) {
  Dev<uint16_t> kv(a.kv);
  Dev<int32_t> positions(a.positions), table(a.table);
  Dev<uint8_t> cache(std::vector<uint8_t>(page_bytes * a.num_pages, 0));
  Dev<int> flag(std::vector<int>{0});
  kernels::Kv4AppendParams p;
  p.kv_new = kv.ptr;
  p.positions = positions.ptr;
  p.page_table = table.ptr;
  p.cache = cache.ptr;
  p.error_flag = flag.ptr;
  p.batch = a.batch;
  p.n_new = a.n_new;
  p.d_c = a.d_c;
  p.d_r = a.d_r;
  p.max_pages = a.max_pages;
  p.num_pages = a.num_pages;
  p.page_size = a.page;
  p.format = f;
  p.c = c;
  std::copy(t.levels, t.levels + 16, p.levels);
  kernels::kv4_cache_append(p, nullptr);
  cuda::check(cudaDeviceSynchronize(), "append");
  *flag_out = flag.download()[0];
  return cache.download();
}

quant::CodebookTable test_table() {
  quant::CodebookTable t;
  for (int k = 0; k < 16; ++k) t.levels[k] = -2.7f + 0.36f * static_cast<float>(k) + 0.01f * static_cast<float>(k % 3);
  return t;
}

void expect_bytes_equal(const std::vector<uint8_t>& gpu, const std::vector<uint8_t>& twin) {
  ASSERT_EQ(gpu.size(), twin.size());
  size_t diff = 0, first = gpu.size();
  for (size_t k = 0; k < gpu.size(); ++k)
    if (gpu[k] != twin[k]) {
      ++diff;
      first = std::min(first, k);
    }
  EXPECT_EQ(diff, 0u) << diff << " bytes differ, first at " << first;
}

TEST(Kv4AppendGpu, Fp4BytesEqualTheTwin) {
  REQUIRE_GPU();
  struct S {
    int d_c, d_r, page;
    float c;
  };
  for (const S s : {S{512, 64, 64, 0.197f}, S{512, 64, 128, 0.156f}, S{256, 64, 64, 0.197f}, S{128, 32, 64, 0.3f},
                    S{32, 8, 64, 0.197f}}) {
    SCOPED_TRACE("d_c " + std::to_string(s.d_c) + " d_r " + std::to_string(s.d_r) + " page " + std::to_string(s.page));
    const AppendCase a = make_append_case(5, 70, s.d_c, s.d_r, s.page, 81 + s.d_c);
    const quant::Fp4CacheLayout l{s.page, s.d_c, s.d_r};
    int flag = -1;
    const std::vector<uint8_t> gpu = gpu_append(a, Kv4Format::Fp4, test_table(), s.c, l.page_bytes(), &flag);
    std::vector<uint8_t> twin(l.page_bytes() * a.num_pages, 0);
    quant::fp4_cache_append_twin(l, quant::Fp4CacheEncoding{quant::Fp4ScaleRule::Round, s.c}, a.kv.data(), a.batch,
                                 a.n_new, a.positions.data(), a.table.data(), a.max_pages, twin.data(), a.num_pages);
    EXPECT_EQ(flag, 0);
    expect_bytes_equal(gpu, twin);
  }
}

TEST(Kv4AppendGpu, CodebookBytesEqualTheTwin) {
  REQUIRE_GPU();
  for (int d_c : {512, 256, 64}) {
    SCOPED_TRACE("d_c " + std::to_string(d_c));
    const AppendCase a = make_append_case(4, 130, d_c, 64, 64, 91 + d_c);
    const quant::CodebookCacheLayout l{64, d_c, 64};
    int flag = -1;
    const std::vector<uint8_t> gpu = gpu_append(a, Kv4Format::Codebook, test_table(), 0.f, l.page_bytes(), &flag);
    std::vector<uint8_t> twin(l.page_bytes() * a.num_pages, 0);
    quant::codebook_cache_append_twin(l, test_table(), a.kv.data(), a.batch, a.n_new, a.positions.data(),
                                      a.table.data(), a.max_pages, twin.data(), a.num_pages);
    EXPECT_EQ(flag, 0);
    expect_bytes_equal(gpu, twin);
  }
}

TEST(Kv4AppendGpu, BadPositionIsFlaggedAndSkipped) {
  REQUIRE_GPU();
  AppendCase a = make_append_case(2, 10, 512, 64, 64, 99);
  a.positions[1] = a.max_pages * a.page - 3;  // runs past the last page slot
  const quant::Fp4CacheLayout l{64, 512, 64};
  int flag = -1;
  const std::vector<uint8_t> gpu = gpu_append(a, Kv4Format::Fp4, test_table(), 0.197f, l.page_bytes(), &flag);
  EXPECT_EQ(flag, 1);
}

// Pages written by the GPU append, decoded by the GPU: against the CPU twin (lib/quant's
// dequantisation to BF16, then decode_twin_bf16 with the same split points). Same rounding
// points; only fp32 summation order differs (tests/kernels/decode_case.hpp's bounds).
TEST(Kv4DecodeGpu, AppendedPagesDecodeAsTheTwin) {
  REQUIRE_GPU();
  for (Kv4Format f : {Kv4Format::Fp4, Kv4Format::Codebook}) {
    SCOPED_TRACE(f == Kv4Format::Fp4 ? "fp4" : "codebook");
    DecodeCase c = make_decode_case({1, 64, 200, 1000}, 1, 16, 512, 64, 64, 101);
    // Rows of the BF16 case's cache, appended request by request at position 0.
    const int dim = c.dim();
    const quant::Fp4CacheLayout lf{64, 512, 64};
    const quant::CodebookCacheLayout lc{64, 512, 64};
    const size_t page_bytes = f == Kv4Format::Fp4 ? lf.page_bytes() : lc.page_bytes();
    Dev<uint8_t> pages(std::vector<uint8_t>(page_bytes * c.num_pages, 0xFF));
    Dev<int32_t> table(c.page_table);
    const quant::CodebookTable t = test_table();
    for (int b = 0; b < c.batch; ++b) {
      std::vector<uint16_t> rows(static_cast<size_t>(c.seqlens[b]) * dim);
      for (int j = 0; j < c.seqlens[b]; ++j) std::copy(c.token(b, j), c.token(b, j) + dim, rows.begin() + j * dim);
      Dev<uint16_t> kv(rows);
      Dev<int32_t> pos(std::vector<int32_t>{0});
      kernels::Kv4AppendParams p;
      p.kv_new = kv.ptr;
      p.positions = pos.ptr;
      p.page_table = table.ptr + static_cast<size_t>(b) * c.max_pages;
      p.cache = pages.ptr;
      p.batch = 1;
      p.n_new = c.seqlens[b];
      p.d_c = 512;
      p.d_r = 64;
      p.max_pages = c.max_pages;
      p.num_pages = c.num_pages;
      p.page_size = 64;
      p.format = f;
      p.c = 0.197f;
      std::copy(t.levels, t.levels + 16, p.levels);
      kernels::kv4_cache_append(p, nullptr);
    }
    cuda::check(cudaDeviceSynchronize(), "append");
    Kv4Case k;
    k.bf = c;
    k.format = f;
    k.pages = pages.download();
    std::copy(t.levels, t.levels + 16, k.levels);
    const int parts = quant::decode_default_parts(cuda::sm_count(), c.host_params(0));
    const Result gpu = run(k, true, parts);
    // The twin: the pages dequantised on the CPU, then the BF16 decode twin.
    std::vector<uint16_t> deq(static_cast<size_t>(c.num_pages) * 64 * dim);
    if (f == Kv4Format::Fp4)
      quant::fp4_cache_to_bf16(lf, k.pages.data(), c.num_pages, deq.data());
    else
      quant::codebook_cache_to_bf16(lc, t, k.pages.data(), c.num_pages, deq.data());
    c.cache = deq;
    quant::decode_twin_bf16(c.host_params(parts));
    const auto m = model::compare(bf16_to_f64(gpu.out), bf16_to_f64(c.out));
    EXPECT_TRUE(m.nonfinite_match) << m.summary();
    EXPECT_LT(m.rel_l2, kTwinRelL2Tol) << m.summary();
    std::vector<double> twin_lse(c.lse.begin(), c.lse.end());
    EXPECT_LT(lse_max_abs_diff(gpu.lse, twin_lse), kTwinLseAbsTol);
  }
}

// ---- the FP8-tensor-core route (kernels/fp8_decode.hpp fp8_decode_fp4_cache_bf16q) ----

// Runs the FP8 decode from the case's bf16 query on `pages`: FP4 pages through the FP8 route,
// or FP8 pages through fp8_decode_bf16q.
Result run_fp8(const Kv4Case& c, const std::vector<uint8_t>& pages, bool fp4, int parts) {
  const DecodeCase& b = c.bf;
  Dev<uint16_t> q(b.q), out(b.out.size());
  Dev<int32_t> table(b.page_table), seqlens(b.seqlens);
  Dev<float> lse(b.lse.size());
  Dev<int> flag(std::vector<int>{0});
  Dev<uint8_t> cache(pages);
  quant::Fp8DecodeParams p;
  p.cache = cache.ptr;
  p.page_table = table.ptr;
  p.seqlens = seqlens.ptr;
  p.out = out.ptr;
  p.lse = lse.ptr;
  p.batch = b.batch;
  p.s_q = b.s_q;
  p.heads = b.heads;
  p.d_c = b.d_c;
  p.d_r = b.d_r;
  p.num_pages = b.num_pages;
  p.page_size = b.page_size;
  p.max_pages = b.max_pages;
  p.scale = b.scale;
  p.num_parts = parts;
  p.error_flag = flag.ptr;
  Dev<char> ws(kernels::fp8_decode_workspace_bytes(p, true));
  p.workspace = ws.ptr;
  p.workspace_bytes = ws.count;
  if (fp4)
    kernels::fp8_decode_fp4_cache_bf16q(p, q.ptr, nullptr);
  else
    kernels::fp8_decode_bf16q(p, q.ptr, nullptr);
  cuda::check(cudaDeviceSynchronize(), "fp8 decode");
  Result r;
  out.download(r.out);
  lse.download(r.lse);
  r.flag = flag.download()[0];
  return r;
}

// The FP4 pages decoded through the FP8 route equal, bit for bit, the FP8 decode of the FP8 pages
// quant::fp4_cache_to_fp8 makes of them (the same consumer code on the same stage bytes), and
// stay within the FP8 decode's float64 bound (tests/kernels/test_fp8_gpu.cpp) of the FP4 values.
TEST(Kv4Fp8RouteGpu, EqualsFp8DecodeOfConvertedPages) {
  REQUIRE_GPU();
  struct Shape {
    int s_q, heads, d_c, d_r, page;
  };
  // <= 32 rows: the narrow kernel; more: the 64-row kernel (H = 64 and 128, s_q 1-2, and the
  // 33-64-row TPLA slices).
  for (const Shape sh : {Shape{1, 16, 512, 64, 64}, Shape{2, 8, 512, 64, 64}, Shape{1, 32, 512, 64, 128},
                         Shape{2, 16, 256, 64, 64}, Shape{1, 4, 128, 32, 64}, Shape{1, 1, 512, 64, 64},
                         Shape{1, 64, 512, 64, 64}, Shape{2, 64, 512, 64, 64}, Shape{1, 128, 512, 64, 128},
                         Shape{1, 40, 512, 32, 64}, Shape{1, 64, 256, 64, 64}, Shape{2, 24, 128, 32, 64}}) {
    SCOPED_TRACE("s_q " + std::to_string(sh.s_q) + " heads " + std::to_string(sh.heads) + " d_c " +
                 std::to_string(sh.d_c) + " d_r " + std::to_string(sh.d_r) + " page " + std::to_string(sh.page));
    auto c = make_case(Kv4Format::Fp4, {1, 63, 64, 65, 300, 1000}, sh.s_q, sh.heads, sh.d_c, sh.d_r, sh.page,
                       131 + sh.heads + sh.d_c, 120, 127);
    const quant::Fp4CacheLayout l{sh.page, sh.d_c, sh.d_r};
    std::vector<uint8_t> fp8(quant::Fp8CacheLayout{sh.page, sh.d_c, sh.d_r}.page_bytes() * c.bf.num_pages);
    quant::fp4_cache_to_fp8(l, c.pages.data(), c.bf.num_pages, fp8.data());
    const int parts = 40;
    const Result a = run_fp8(c, c.pages, true, parts), b = run_fp8(c, fp8, false, parts);
    EXPECT_EQ(a.flag, 0);
    size_t diff = 0;
    for (size_t i = 0; i < a.out.size(); ++i) diff += a.out[i] != b.out[i] ? 1 : 0;
    EXPECT_EQ(diff, 0u) << "outputs differ at " << diff << " of " << a.out.size();
    EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "LSE differs";
    const Reference ref = reference_decode(c.bf);  // float64 on the FP4 values (the dequantised cache)
    const auto m = model::compare(bf16_to_f64(a.out), ref.out);
    EXPECT_TRUE(m.nonfinite_match) << m.summary();
    EXPECT_LT(m.rel_l2, 0.08) << m.summary();
  }
}

// More than 64 rows at d_c <= 256 go to the 128-row TPLA-slice kernel, which reads no FP4: the
// route refuses them and names the row count and d_c (the BF16 route takes them).
TEST(Kv4Fp8RouteGpu, RefusesRowsItHasNoKernelFor) {
  REQUIRE_GPU();
  auto c = make_case(Kv4Format::Fp4, {64}, 1, 128, 256, 64, 64, 77);
  try {
    run_fp8(c, c.pages, true, 8);
    FAIL() << "128 rows at d_c = 256 must be refused by the FP8 route";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("128 query rows at d_c = 256"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace mla::test
