#pragma once
// The 4-bit backends' test problem (tests/verify/test_kv4_*.cpp): per-layer parameters as
// mla-calibrate fits them, a paged cache of randomly placed pages (a sentinel -1 past each
// request's need, spare pages never written) filled token by token through the DecodeBackend
// interface, one decode step, and the float64 attention on the unquantised bf16 values.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/metrics.hpp"
#include "quant/fp4_to_fp8.hpp"
#include "quant/fp8_cache_layout.hpp"
#include "transform/kv4_params.hpp"
#include "verify/decode_backend.hpp"

namespace kv4_test {

using namespace mla;
using namespace mla::verify;

// The default shape (the tiny models' tp = 1 slice: d_c 128, d_r 32).
constexpr int kB = 2, kH = 8, kDc = 128, kDr = 32, kDim = kDc + kDr, kP = 64;

// Layers of one format's parameters: the fitted c of the tiny models and a 16-level Lloyd-Max
// table for a unit Gaussian; table_scale widens both (a wrong table).
inline transform::Kv4Params params(const std::string& format, int layers, double table_scale = 1.0) {
  const double h[8] = {0.1284, 0.3881, 0.6568, 0.9423, 1.2562, 1.6181, 2.0690, 2.7326};
  std::vector<double> lv(16);
  for (int k = 0; k < 8; ++k) lv[7 - k] = -h[k] * table_scale, lv[8 + k] = h[k] * table_scale;
  transform::Kv4Params p;
  p.format = format;
  p.calib = "(test)";
  for (int i = 0; i < layers; ++i) {
    transform::Kv4LayerParams L;
    L.c_fitted = 0.197f;
    L.fp4 = quant::Fp4CacheEncoding{quant::Fp4ScaleRule::Round, static_cast<float>(0.197 * table_scale)};
    L.codebook_levels = lv;
    L.codebook_mean_square = 1.0;
    L.codebook = quant::codebook_unit_levels(lv, 1.0);
    p.layers.push_back(L);
  }
  return p;
}

struct Kv4Shape {
  std::vector<int> lens = {kP + 1, 2 * kP - 7};  // one per request; both cross a page edge
  int heads = kH, d_c = kDc, d_r = kDr, page = kP;
};

inline std::string shape_name(const Kv4Shape& s) {
  return "heads " + std::to_string(s.heads) + " d_c " + std::to_string(s.d_c) + " d_r " + std::to_string(s.d_r) +
         " page " + std::to_string(s.page);
}

struct Problem {
  Kv4Shape sh;
  int batch = 0, dim = 0, max_len = 0, max_pages = 0, num_pages = 0;
  std::vector<uint16_t> kv, q;  // kv [batch, max_len, dim], q [batch, heads, dim]
  std::vector<int32_t> table, seqlens;
  float scale = 0.f;

  explicit Problem(uint32_t seed, Kv4Shape s = {}) : sh(std::move(s)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> ud(-1.f, 1.f);
    const int P = sh.page;
    batch = static_cast<int>(sh.lens.size());
    dim = sh.d_c + sh.d_r;
    scale = 1.f / std::sqrt(static_cast<float>(dim));
    max_len = *std::max_element(sh.lens.begin(), sh.lens.end());
    max_pages = (max_len + P - 1) / P + 1;  // one sentinel past the need
    num_pages = batch * (max_pages - 1) + 2;
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(size_t(batch) * max_pages, -1);
    for (int b = 0; b < batch; ++b)
      for (int k = 0; k < max_pages - 1; ++k) table[size_t(b) * max_pages + k] = perm[b * (max_pages - 1) + k];
    seqlens.assign(sh.lens.begin(), sh.lens.end());
    kv.assign(size_t(batch) * max_len * dim, 0);
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < max_len; ++t) {
        const float mag = std::pow(10.f, 0.3f * ud(rng));  // per-token norms vary, as RMSNorm(c) * gamma does
        for (int i = 0; i < dim; ++i)
          kv[(size_t(b) * max_len + t) * dim + i] = float_to_bf16(nd(rng) * (i < sh.d_c ? mag : 1.f));
      }
    q.assign(size_t(batch) * sh.heads * dim, 0);
    for (auto& v : q) v = float_to_bf16(nd(rng));
  }
  CacheShape cache_shape() const { return CacheShape{batch, num_pages, sh.page, max_pages, dim}; }
  // Appends every token (one at a time, every request at once) and decodes.
  void run(DecodeBackend& be, std::vector<uint16_t>& out, std::vector<float>& lse) const {
    const int c = be.create_cache(cache_shape(), table);
    for (int t = 0; t < max_len; ++t) {
      std::vector<uint16_t> rows(size_t(batch) * dim);
      for (int b = 0; b < batch; ++b)
        std::copy_n(kv.begin() + (size_t(b) * max_len + t) * dim, dim, rows.begin() + size_t(b) * dim);
      be.append(c, rows, 1, std::vector<int32_t>(batch, t));
    }
    be.decode(c, q, sh.heads, sh.d_c, sh.d_r, seqlens, scale, out, lse);
  }
  // float64 attention on the bf16 values.
  std::vector<double> reference() const {
    const int H = sh.heads, d_c = sh.d_c;
    std::vector<double> o(size_t(batch) * H * d_c, 0.0);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < H; ++h) {
        const uint16_t* qr = q.data() + (size_t(b) * H + h) * dim;
        std::vector<double> s(sh.lens[b]);
        double m = -INFINITY;
        for (int j = 0; j < sh.lens[b]; ++j) {
          const uint16_t* kr = kv.data() + (size_t(b) * max_len + j) * dim;
          double a = 0;
          for (int i = 0; i < dim; ++i) a += double(bf16_to_float(qr[i])) * bf16_to_float(kr[i]);
          m = std::max(m, s[j] = a * scale);
        }
        double den = 0;
        for (double& v : s) den += (v = std::exp(v - m));
        for (int j = 0; j < sh.lens[b]; ++j)
          for (int i = 0; i < d_c; ++i)
            o[(size_t(b) * H + h) * d_c + i] += s[j] / den * bf16_to_float(kv[(size_t(b) * max_len + j) * dim + i]);
      }
    return o;
  }
};

// The fp8 route's cache from the parts: every token of every request appended at once by the FP4
// append twin with L's encoding, then every page converted by quant::fp4_cache_to_fp8
// ([num_pages, Fp8CacheLayout page_bytes], the problem's page ids).
inline std::vector<uint8_t> converted_fp8_pages(const Problem& pr, const transform::Kv4LayerParams& L) {
  const Kv4Shape& s = pr.sh;
  const quant::Fp4CacheLayout l{s.page, s.d_c, s.d_r};
  std::vector<uint8_t> fp4(size_t(pr.num_pages) * l.page_bytes(), 0xFF);
  std::vector<uint8_t> fp8(size_t(pr.num_pages) * quant::Fp8CacheLayout{s.page, s.d_c, s.d_r}.page_bytes());
  const std::vector<int32_t> pos(pr.batch, 0);
  quant::fp4_cache_append_twin(l, L.fp4, pr.kv.data(), pr.batch, pr.max_len, pos.data(), pr.table.data(), pr.max_pages,
                               fp4.data(), pr.num_pages);
  quant::fp4_cache_to_fp8(l, fp4.data(), pr.num_pages, fp8.data());
  return fp8;
}

inline model::ErrorMetrics vs_reference(const std::vector<uint16_t>& out, const std::vector<double>& ref) {
  std::vector<double> y(out.size());
  for (size_t i = 0; i < out.size(); ++i) y[i] = bf16_to_float(out[i]);
  return model::compare(y, ref);
}

}  // namespace kv4_test
