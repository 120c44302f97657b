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
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "decode_case.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/kv4_decode.hpp"
#include "kernels/mla_decode.hpp"

namespace mla::test {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: GPU test skipped"

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
  DecodeCase wide = make_decode_case({64}, 2, 16, 512, 64, 64, 72);
  kernels::Kv4DecodeParams kp;
  kp.base = wide.host_params(0);
  try {
    kernels::mla_decode_kv4(kp, nullptr);
    FAIL() << "32 query rows must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("s_q * heads = 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mla::test
