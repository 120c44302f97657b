#pragma once
// A random paged BF16 decode problem for the twin and GPU tests, and its float64 reference.
// Adversarial layout, as FlashMLA's tests: pages are a random permutation of the pool, every
// cache value not written by a request (unused pages, page tails) is NaN, page-table entries
// past a request's pages hold a huge sentinel id.
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "model/attention_reference.hpp"
#include "model/metrics.hpp"
#include "quant/decode_twin_bf16.hpp"

namespace mla::test {

// SPEC section 5: BF16 kernels vs the float64 reference.
constexpr double kRelL2Tol = 8e-3;
constexpr double kCosDiffTol = 5e-6;
// LSE vs float64: logits are exact products of bf16 values summed in fp32.
constexpr double kLseAbsTol = 1e-3;
// GPU vs its CPU twin: same rounding points; only fp32 summation order differs, which can flip
// a bf16 rounding of P or of the output by one ulp (2^-8 relative) at a few elements.
constexpr double kTwinRelL2Tol = 1e-3;
constexpr double kTwinLseAbsTol = 1e-4;

constexpr int32_t kSentinelPage = std::numeric_limits<int32_t>::max();
constexpr uint16_t kBf16NaN = 0x7FC0;

struct DecodeCase {
  int batch = 0, s_q = 1, heads = 0, d_c = 0, d_r = 0, page_size = 64, num_pages = 0, max_pages = 0;
  float scale = 0.f;
  std::vector<int32_t> seqlens;     // [batch]
  std::vector<uint16_t> q;          // [batch, s_q, heads, d_c + d_r]
  std::vector<uint16_t> cache;      // [num_pages, page_size, d_c + d_r]
  std::vector<int32_t> page_table;  // [batch, max_pages]
  std::vector<uint16_t> out;        // [batch, s_q, heads, d_c]
  std::vector<float> lse;           // [batch, s_q, heads]
  int dim() const { return d_c + d_r; }
  int rows() const { return s_q * heads; }

  quant::Bf16DecodeParams host_params(int num_parts) {
    quant::Bf16DecodeParams p;
    p.q = q.data();
    p.kv_cache = cache.data();
    p.page_table = page_table.data();
    p.seqlens = seqlens.data();
    p.out = out.data();
    p.lse = lse.data();
    quant::set_decode_shape(p, batch, s_q, heads, d_c, d_r, num_pages, page_size, max_pages, scale);
    p.num_parts = num_parts;
    return p;
  }
  // Cache row of token j of request b (bf16 bits).
  const uint16_t* token(int b, int j) const {
    const int page = page_table[static_cast<size_t>(b) * max_pages + j / page_size];
    return cache.data() + (static_cast<size_t>(page) * page_size + j % page_size) * dim();
  }
};

inline DecodeCase make_decode_case(const std::vector<int32_t>& seqlens, int s_q, int heads, int d_c, int d_r,
                                   int page_size, uint64_t seed, int spare_pages = 3) {
  DecodeCase c;
  c.batch = static_cast<int>(seqlens.size());
  c.s_q = s_q;
  c.heads = heads;
  c.d_c = d_c;
  c.d_r = d_r;
  c.page_size = page_size;
  c.seqlens = seqlens;
  c.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_c + d_r)));  // logits O(1)
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  int used = 0;
  c.max_pages = 1;
  for (int32_t L : seqlens) {
    const int np = (L + page_size - 1) / page_size;
    used += np;
    c.max_pages = std::max(c.max_pages, np + 1);  // at least one sentinel entry per row
  }
  c.num_pages = used + spare_pages;
  const int dim = c.dim();
  c.cache.assign(static_cast<size_t>(c.num_pages) * page_size * dim, kBf16NaN);
  c.page_table.assign(static_cast<size_t>(c.batch) * c.max_pages, kSentinelPage);
  std::vector<int32_t> perm(c.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  int next = 0;
  for (int b = 0; b < c.batch; ++b) {
    const int np = (seqlens[b] + page_size - 1) / page_size;
    for (int i = 0; i < np; ++i) c.page_table[static_cast<size_t>(b) * c.max_pages + i] = perm[next++];
    for (int j = 0; j < seqlens[b]; ++j) {
      const int page = c.page_table[static_cast<size_t>(b) * c.max_pages + j / page_size];
      uint16_t* row = c.cache.data() + (static_cast<size_t>(page) * page_size + j % page_size) * dim;
      for (int i = 0; i < dim; ++i) row[i] = float_to_bf16(normal(rng));
    }
  }
  c.q.resize(static_cast<size_t>(c.batch) * c.rows() * dim);
  for (auto& v : c.q) v = float_to_bf16(normal(rng));
  c.out.assign(static_cast<size_t>(c.batch) * c.rows() * d_c, kBf16NaN);  // must be overwritten
  c.lse.assign(static_cast<size_t>(c.batch) * c.rows(), std::numeric_limits<float>::quiet_NaN());
  return c;
}

// Float64 reference through model::absorbed_decode_core, with the causal rule for s_q = 2
// (query token t sees L - (s_q - 1 - t) keys). Rows with no key: out 0, lse -inf.
struct Reference {
  std::vector<double> out;  // [batch, s_q, heads, d_c]
  std::vector<double> lse;  // [batch, s_q, heads]
};
inline Reference reference_decode(const DecodeCase& c) {
  Reference r;
  r.out.assign(static_cast<size_t>(c.batch) * c.rows() * c.d_c, 0.0);
  r.lse.assign(static_cast<size_t>(c.batch) * c.rows(), -std::numeric_limits<double>::infinity());
  const int dim = c.dim();
  for (int b = 0; b < c.batch; ++b)
    for (int t = 0; t < c.s_q; ++t) {
      const int keys = c.seqlens[b] - (c.s_q - 1 - t);
      if (keys <= 0) continue;
      model::LatentCache cache;
      cache.x.resize(keys, c.d_c);
      cache.k_pe.resize(keys, c.d_r);
      for (int j = 0; j < keys; ++j) {
        const uint16_t* row = c.token(b, j);
        for (int i = 0; i < c.d_c; ++i) cache.x(j, i) = bf16_to_float(row[i]);
        for (int i = 0; i < c.d_r; ++i) cache.k_pe(j, i) = bf16_to_float(row[c.d_c + i]);
      }
      MatrixR q_lat(c.heads, c.d_c), q_pe(c.heads, c.d_r);
      for (int h = 0; h < c.heads; ++h) {
        const uint16_t* qrow = c.q.data() + ((static_cast<size_t>(b) * c.s_q + t) * c.heads + h) * dim;
        for (int i = 0; i < c.d_c; ++i) q_lat(h, i) = bf16_to_float(qrow[i]);
        for (int i = 0; i < c.d_r; ++i) q_pe(h, i) = bf16_to_float(qrow[c.d_c + i]);
      }
      const model::DecodeCoreResult res = model::absorbed_decode_core(q_lat, q_pe, cache, c.scale);
      for (int h = 0; h < c.heads; ++h) {
        const size_t row = (static_cast<size_t>(b) * c.s_q + t) * c.heads + h;
        r.lse[row] = res.lse[h];
        for (int i = 0; i < c.d_c; ++i) r.out[row * c.d_c + i] = res.o_lat(h, i);
      }
    }
  return r;
}

inline std::vector<double> bf16_to_f64(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = bf16_to_float(v[i]);
  return d;
}

// Max |a - b| over entries, with -inf == -inf counted as equal and any other non-finite
// mismatch as +inf.
inline double lse_max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i]) && b[i] < 0) {
      if (!(std::isinf(a[i]) && a[i] < 0)) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
  }
  return worst;
}

}  // namespace mla::test
