#pragma once
// A random FP8 decode problem (bf16 latent cache appended through the FP8 append twin, bf16
// query quantised per row) with its float64 references; shared by the twin's tests and the GPU
// tests (tests/kernels/test_fp8_gpu.cpp).
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "quant/decode_twin_bf16.hpp"
#include "quant/fp8_cache_format.hpp"
#include "quant/fp8_decode_twin.hpp"

namespace mla::test {

struct Fp8Case {
  int batch = 2, s_q = 1, heads = 16, d_c = 512, d_r = 64, page_size = 64;
  std::vector<int> lens;
  float scale = 0.f;
  // Filled by build():
  int max_pages = 0, num_pages = 0;
  std::vector<uint16_t> kv;        // [batch, max_len, d_c + d_r] bf16 (the values appended)
  std::vector<uint16_t> q;         // [batch, s_q, heads, d_c + d_r] bf16
  std::vector<uint8_t> cache;      // paged FP8
  std::vector<int32_t> table, seqlens;
  std::vector<uint8_t> q8;
  std::vector<uint16_t> q_rope;
  std::vector<float> q_scale;
  int max_len = 0;

  int rows() const { return s_q * heads; }
  int dim() const { return d_c + d_r; }
  quant::Fp8CacheLayout layout() const { return {page_size, d_c, d_r}; }

  // Random values (latent per-token magnitudes varying 0.3x .. 2x, logits of std ~ 1),
  // pages in a shuffled order, unused page-table entries -1, unused cache bytes `fill`.
  void build(uint32_t seed, uint8_t fill = 0xFF) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> ud(-1.f, 1.f);
    max_len = 1;
    for (int l : lens) max_len = std::max(max_len, l);
    max_pages = (max_len + page_size - 1) / page_size + 1;  // one sentinel entry past the need
    seqlens.assign(lens.begin(), lens.end());
    std::vector<int> need(batch);
    num_pages = 0;
    for (int b = 0; b < batch; ++b) num_pages += need[b] = (lens[b] + page_size - 1) / page_size;
    num_pages += 2;  // pages nobody references
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(static_cast<size_t>(batch) * max_pages, -1);
    int next = 0;
    for (int b = 0; b < batch; ++b)
      for (int k = 0; k < need[b]; ++k) table[b * max_pages + k] = perm[next++];
    kv.assign(static_cast<size_t>(batch) * max_len * dim(), 0);
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < lens[b]; ++t) {
        const float mag = std::pow(10.f, 0.4f * ud(rng) - 0.1f);  // 0.3 .. 2
        for (int i = 0; i < dim(); ++i)
          kv[(static_cast<size_t>(b) * max_len + t) * dim() + i] = float_to_bf16(nd(rng) * (i < d_c ? mag : 1.f));
      }
    q.assign(static_cast<size_t>(batch) * rows() * dim(), 0);
    for (auto& v : q) v = float_to_bf16(nd(rng));
    if (scale == 0.f) scale = 1.f / std::sqrt(static_cast<float>(dim()));
    cache.assign(static_cast<size_t>(num_pages) * layout().page_bytes(), fill);
    append_all();
    quantize_query();
  }
  // After build(): every request's logits made extreme (docs/formats/kv-fp8.md, "very cold
  // tiles"): every query row is e_0 (latent channel 0 = 1, the rest and the RoPE part 0) and
  // scale = 10 / log2(e), so a token's base-2 logit is 10 x its channel 0. Token 5 of tile 0 is
  // hot (channel 0 = 4: logit 40), the rest of tile 0 at 0 (2^-40 of it), tile 1 at -6 (2^-100)
  // and every later tile at -7.75 (2^-117.5): without a lower bound on the block scale, O and l
  // (kept in units of the current tile's scale) overflow on the third tile. The other latent
  // channels stay random below 1 in magnitude, the RoPE values 0. Needs lens of 129 or more.
  void make_cold_tiles() {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> ud(-0.9f, 0.9f);
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < lens[b]; ++t) {
        uint16_t* row = kv.data() + (static_cast<size_t>(b) * max_len + t) * dim();
        const float c0 = t < 64 ? (t == 5 ? 4.f : 0.f) : (t < 128 ? -6.f : -7.75f);
        row[0] = float_to_bf16(c0);
        for (int i = 1; i < d_c; ++i) row[i] = float_to_bf16(ud(rng));
        for (int i = d_c; i < dim(); ++i) row[i] = 0;
      }
    std::fill(q.begin(), q.end(), uint16_t{0});
    for (int r = 0; r < batch * rows(); ++r) q[static_cast<size_t>(r) * dim()] = float_to_bf16(1.f);
    scale = 10.f / 1.4426950408889634f;
    append_all();
    quantize_query();
  }
  void append_all() {
    for (int b = 0; b < batch; ++b) {
      if (lens[b] == 0) continue;
      const int32_t pos = 0;
      quant::fp8_cache_append_twin(layout(), kv.data() + static_cast<size_t>(b) * max_len * dim(), 1, lens[b], &pos,
                                   table.data() + static_cast<size_t>(b) * max_pages, max_pages, cache.data(), num_pages);
    }
  }
  void quantize_query() {
    const int n = batch * rows();
    q8.assign(static_cast<size_t>(n) * d_c, 0);
    q_rope.assign(static_cast<size_t>(n) * d_r, 0);
    q_scale.assign(n, 0.f);
    quant::fp8_quantize_query_twin(q.data(), n, d_c, d_r, q8.data(), q_rope.data(), q_scale.data());
  }
  quant::Fp8DecodeParams params(std::vector<uint16_t>& out, std::vector<float>& lse) const {
    out.assign(static_cast<size_t>(batch) * rows() * d_c, 0);
    lse.assign(static_cast<size_t>(batch) * rows(), 0.f);
    quant::Fp8DecodeParams p;
    p.q8 = q8.data();
    p.q_rope = q_rope.data();
    p.q_scale = q_scale.data();
    p.cache = cache.data();
    p.page_table = table.data();
    p.seqlens = seqlens.data();
    p.out = out.data();
    p.lse = lse.data();
    quant::set_decode_shape(p, batch, s_q, heads, d_c, d_r, num_pages, page_size, max_pages, scale);
    return p;
  }

  // Standard deviation of the logit error that E4M3 rounding of q_c and x (independent, RMS
  // 0.024 relative each, tests/quant/test_fp8_decode_twin.cpp) gives row r of request b, at the
  // key where it is largest: 0.034 * scale * sqrt(sum_i q_i^2 x_ji^2).
  double logit_error_sd(int b, int r) const {
    const size_t qi = static_cast<size_t>(b) * rows() + r;
    double worst = 0;
    for (int t = 0; t < lens[b]; ++t) {
      double s2 = 0;
      for (int i = 0; i < d_c; ++i) {
        const double qv = bf16_to_float(q[qi * dim() + i]);
        const double xv = bf16_to_float(kv[(static_cast<size_t>(b) * max_len + t) * dim() + i]);
        s2 += qv * qv * xv * xv;
      }
      worst = std::max(worst, s2);
    }
    return 0.034 * scale * std::sqrt(worst);
  }

  // float64 attention: dequantised = false uses the bf16 values appended (the model's cache);
  // true uses the cache and query as the FP8 format stores them (isolates the decode's own
  // rounding: P re-quantisation, fp32, bf16 output). out [batch, rows, d_c], lse [batch, rows].
  void reference(bool dequantised, std::vector<double>& out, std::vector<double>& lse) const {
    out.assign(static_cast<size_t>(batch) * rows() * d_c, 0.0);
    lse.assign(static_cast<size_t>(batch) * rows(), -std::numeric_limits<double>::infinity());
    const quant::Fp8CacheLayout l = layout();
    std::vector<float> xf(d_c), kf(d_r);
    for (int b = 0; b < batch; ++b) {
      const int L = lens[b];
      std::vector<std::vector<double>> keys(L, std::vector<double>(dim()));
      for (int t = 0; t < L; ++t) {
        if (dequantised) {
          const int page = table[b * max_pages + t / page_size];
          quant::dequant_fp8_token(l, cache.data() + static_cast<size_t>(page) * l.page_bytes(), t % page_size, xf.data(),
                                   kf.data());
          for (int i = 0; i < d_c; ++i) keys[t][i] = xf[i];
          for (int i = 0; i < d_r; ++i) keys[t][d_c + i] = kf[i];
        } else {
          for (int i = 0; i < dim(); ++i) keys[t][i] = bf16_to_float(kv[(static_cast<size_t>(b) * max_len + t) * dim() + i]);
        }
      }
      for (int r = 0; r < rows(); ++r) {
        const size_t qi = static_cast<size_t>(b) * rows() + r;
        std::vector<double> qv(dim());
        for (int i = 0; i < dim(); ++i) {
          if (dequantised)
            qv[i] = i < d_c ? double(e4m3_to_float(q8[qi * d_c + i])) * q_scale[qi]
                            : double(bf16_to_float(q_rope[qi * d_r + i - d_c])) * q_scale[qi];
          else
            qv[i] = bf16_to_float(q[qi * dim() + i]);
        }
        const int limit = L - (s_q - 1 - r / heads);
        if (limit <= 0) continue;
        std::vector<double> s(limit);
        double m = -std::numeric_limits<double>::infinity();
        for (int t = 0; t < limit; ++t) {
          double a = 0;
          for (int i = 0; i < dim(); ++i) a += qv[i] * keys[t][i];
          s[t] = a * scale;
          m = std::max(m, s[t]);
          if (std::isnan(s[t])) m = s[t];
        }
        double sum = 0;
        for (int t = 0; t < limit; ++t) sum += std::exp(s[t] - m);
        for (int t = 0; t < limit; ++t) {
          const double w = std::exp(s[t] - m) / sum;
          for (int c = 0; c < d_c; ++c) out[qi * d_c + c] += w * keys[t][c];
        }
        lse[qi] = m + std::log(sum);
      }
    }
  }
};

}  // namespace mla::test
