// CPU twins of kernels/prefix_attention.cu: the same tiles, splits and rounding points (see the
// header); only the order of fp32 additions inside a dot product differs from the tensor cores.
#include "quant/prefix_twin_bf16.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace mla::quant {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

[[noreturn]] void bad(const char* what, const std::string& msg) { throw InputError(std::string(what) + ": " + msg); }
std::string field(const char* name, long long v) { return std::string(name) + " = " + std::to_string(v); }

// The kernels are instantiated for the two head shapes in use: DeepSeek-V3 / Kimi-K2
// (d_n 128, d_r 64, d_v 128) and the tiny test models (64, 32, 64).
void check_heads_dims(const char* what, int heads, int d_n, int d_r, int d_v) {
  if (heads < 1 || heads > 128) bad(what, field("heads", heads) + " (supported: 1..128)");
  const bool big = d_n == 128 && d_r == 64 && d_v == 128;
  const bool tiny = d_n == 64 && d_r == 32 && d_v == 64;
  if (!big && !tiny)
    bad(what, "(d_n, d_r, d_v) = (" + std::to_string(d_n) + ", " + std::to_string(d_r) + ", " + std::to_string(d_v) +
                  ") (supported: (128, 64, 128), (64, 32, 64))");
}
void check_dc(const char* what, int d_c) {
  if (d_c < 64 || d_c > 512 || d_c % 64 != 0) bad(what, field("d_c", d_c) + " (supported: a multiple of 64 in 64..512)");
}

// Tokens per split: whole 64-token tiles, as even as possible.
int split_tokens(int prefix_len, int splits) {
  const int tiles = (prefix_len + kPrefixTile - 1) / kPrefixTile;
  return (tiles + splits - 1) / splits * kPrefixTile;
}

}  // namespace

int prefix_default_splits(int rows, int heads, int prefix_len, int sm_count) {
  const int blocks = (rows + kPrefixRowsPerBlock - 1) / kPrefixRowsPerBlock * heads;
  const int tiles = std::max(1, (prefix_len + kPrefixTile - 1) / kPrefixTile);
  const int limit = std::min(16, tiles);
  for (int s = 1; s <= limit; ++s) {
    const long long ctas = static_cast<long long>(blocks) * s;
    const long long waves = (ctas + sm_count - 1) / sm_count;
    if (static_cast<double>(ctas) / static_cast<double>(waves * sm_count) >= 0.9) return s;
  }
  return limit;
}

size_t prefix_workspace_bytes(int rows, int heads, int d_v, int splits) {
  const size_t n = static_cast<size_t>(splits) * rows * heads;
  size_t lse = (n * sizeof(float) + 255) / 256 * 256;
  return lse + n * d_v * sizeof(float);
}

void validate_prefix_decompress(const PrefixDecompressParams& p) {
  const char* w = "prefix decompress params";
  if (!p.kv_cache) bad(w, "kv_cache is null");
  if (!p.page_table) bad(w, "page_table is null");
  if (!p.kv_b) bad(w, "kv_b is null");
  if (!p.k || !p.v) bad(w, "k or v is null");
  if (p.prefix_len < 1) bad(w, field("prefix_len", p.prefix_len) + " (must be >= 1)");
  if (p.page_size != 64 && p.page_size != 128) bad(w, field("page_size", p.page_size) + " (supported: 64, 128)");
  if (p.num_pages < 1) bad(w, field("num_pages", p.num_pages) + " (must be >= 1)");
  if (static_cast<long long>(p.max_pages) * p.page_size < p.prefix_len)
    bad(w, field("max_pages", p.max_pages) + " pages of " + std::to_string(p.page_size) + " cannot hold prefix_len = " +
               std::to_string(p.prefix_len));
  check_heads_dims(w, p.heads, p.d_n, p.d_r, p.d_v);
  check_dc(w, p.d_c);
}

void validate_prefix_attn(const PrefixAttnParams& p) {
  const char* w = "prefix attention params";
  if (!p.q || !p.k || !p.v) bad(w, "q, k or v is null");
  if (!p.part_o || !p.part_lse) bad(w, "part_o or part_lse is null");
  if (p.rows < 1) bad(w, field("rows", p.rows) + " (batch * s_q, must be >= 1)");
  if (p.prefix_len < 1) bad(w, field("prefix_len", p.prefix_len) + " (must be >= 1)");
  if (p.splits < 1 || p.splits > 64) bad(w, field("splits", p.splits) + " (supported: 1..64)");
  if (!(std::isfinite(p.scale) && p.scale > 0.f)) bad(w, "scale = " + std::to_string(p.scale) + " (must be finite, > 0)");
  check_heads_dims(w, p.heads, p.d_n, p.d_r, p.d_v);
}

void validate_prefix_merge(const PrefixMergeParams& p) {
  const char* w = "prefix merge params";
  if (!p.o_lat || !p.lse_lat || !p.kv_b || !p.out || !p.lse) bad(w, "o_lat, lse_lat, kv_b, out or lse is null");
  if (p.splits < 0 || p.splits > 64) bad(w, field("splits", p.splits) + " (supported: 0..64)");
  if (p.splits > 0 && (!p.part_o || !p.part_lse)) bad(w, "part_o or part_lse is null with splits > 0");
  if (p.rows < 1) bad(w, field("rows", p.rows) + " (must be >= 1)");
  if (p.heads < 1 || p.heads > 128) bad(w, field("heads", p.heads) + " (supported: 1..128)");
  if (!((p.d_n == 128 && p.d_v == 128) || (p.d_n == 64 && p.d_v == 64)))
    bad(w, "(d_n, d_v) = (" + std::to_string(p.d_n) + ", " + std::to_string(p.d_v) + ") (supported: (128, 128), (64, 64))");
  check_dc(w, p.d_c);
}

void validate_mixed_decode(const MixedDecodeParams& p) {
  const char* w = "mixed decode params";
  validate_decode_params(p.suffix);
  if (!p.q_naive) bad(w, "q_naive is null");
  if (!p.kv_b || !p.out || !p.lse) bad(w, "kv_b, out or lse is null");
  if (!(p.b_theta >= 0.0)) bad(w, "b_theta = " + std::to_string(p.b_theta) + " (must be >= 0)");
  check_heads_dims(w, p.suffix.heads, p.d_n, p.suffix.d_r, p.d_v);
  check_dc(w, p.suffix.d_c);
  if (mixed_uses_prefix(p)) {
    if (!p.prefix_k || !p.prefix_v) bad(w, "prefix_k or prefix_v is null");
    if (p.prefix_len < 1) bad(w, field("prefix_len", p.prefix_len) + " (must be >= 1)");
    if (p.prefix_splits < 0) bad(w, field("prefix_splits", p.prefix_splits) + " (must be >= 0)");
  } else {
    validate_decode_params(p.full);
    if (p.full.batch != p.suffix.batch || p.full.s_q != p.suffix.s_q || p.full.heads != p.suffix.heads ||
        p.full.d_c != p.suffix.d_c || p.full.d_r != p.suffix.d_r)
      bad(w, "full (fallback) decode shape differs from the suffix decode shape");
  }
}

void prefix_decompress_twin_bf16(const PrefixDecompressParams& p) {
  validate_prefix_decompress(p);
  const int dim = p.d_c + p.d_r, dqk = p.d_n + p.d_r, per_head = p.d_n + p.d_v;
  std::vector<float> w(static_cast<size_t>(p.heads) * per_head * p.d_c), x(p.d_c);
  for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_float(p.kv_b[i]);
  for (int j = 0; j < p.prefix_len; ++j) {
    const int slot = j / p.page_size;
    const int page = p.page_table[slot];
    if (page < 0 || page >= p.num_pages)
      bad("prefix decompress", "page_table[" + std::to_string(slot) + "] = " + std::to_string(page) +
                                   " is outside [0, num_pages = " + std::to_string(p.num_pages) + ")");
    const uint16_t* row = p.kv_cache + (static_cast<size_t>(page) * p.page_size + j % p.page_size) * dim;
    for (int c = 0; c < p.d_c; ++c) x[c] = bf16_to_float(row[c]);
    for (int h = 0; h < p.heads; ++h) {
      uint16_t* k = p.k + (static_cast<size_t>(j) * p.heads + h) * dqk;
      uint16_t* v = p.v + (static_cast<size_t>(j) * p.heads + h) * p.d_v;
      for (int n = 0; n < per_head; ++n) {
        const float* wr = w.data() + (static_cast<size_t>(h) * per_head + n) * p.d_c;
        float a = 0.f;
        for (int c = 0; c < p.d_c; ++c) a += wr[c] * x[c];
        if (n < p.d_n) k[n] = float_to_bf16(a);
        else v[n - p.d_n] = float_to_bf16(a);
      }
      std::copy(row + p.d_c, row + dim, k + p.d_n);
    }
  }
}

void prefix_attn_twin_bf16(const PrefixAttnParams& p) {
  validate_prefix_attn(p);
  const int dqk = p.d_n + p.d_r;
  const float scale_log2 = p.scale * kLog2e;
  const int per_split = split_tokens(p.prefix_len, p.splits);
  std::vector<float> q(dqk), x2(kPrefixTile), pb(kPrefixTile), acc(p.d_v);
  for (int s = 0; s < p.splits; ++s) {
    const int j_begin = s * per_split, j_end = std::min(p.prefix_len, j_begin + per_split);
    for (int row = 0; row < p.rows; ++row)
      for (int h = 0; h < p.heads; ++h) {
        const uint16_t* qs = p.q + (static_cast<size_t>(row) * p.heads + h) * dqk;
        for (int i = 0; i < dqk; ++i) q[i] = bf16_to_float(qs[i]);
        float m = kNegInf, l = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int j0 = j_begin; j0 < j_end; j0 += kPrefixTile) {
          float tmax = kNegInf;
          for (int jj = 0; jj < kPrefixTile; ++jj) {
            const int j = j0 + jj;
            if (j >= j_end) {
              x2[jj] = kNegInf;
              continue;
            }
            const uint16_t* kr = p.k + (static_cast<size_t>(j) * p.heads + h) * dqk;
            float d = 0.f;
            for (int i = 0; i < dqk; ++i) d += q[i] * bf16_to_float(kr[i]);
            x2[jj] = d * scale_log2;
            tmax = std::max(tmax, x2[jj]);
          }
          const float m_new = std::max(m, tmax);  // finite: every tile has a key
          const float alpha = exp2f(m - m_new);
          float tile_sum = 0.f;
          for (int jj = 0; jj < kPrefixTile; ++jj) {
            const float pv = exp2f(x2[jj] - m_new);
            tile_sum += pv;
            pb[jj] = bf16_to_float(float_to_bf16(pv));  // P rounded to bf16 before P.V
          }
          l = l * alpha + tile_sum;
          for (int c = 0; c < p.d_v; ++c) {
            float a = 0.f;
            for (int jj = 0; jj < kPrefixTile && j0 + jj < j_end; ++jj)
              a += pb[jj] * bf16_to_float(p.v[(static_cast<size_t>(j0 + jj) * p.heads + h) * p.d_v + c]);
            acc[c] = acc[c] * alpha + a;
          }
          m = m_new;
        }
        const size_t idx = (static_cast<size_t>(s) * p.rows + row) * p.heads + h;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        for (int c = 0; c < p.d_v; ++c) p.part_o[idx * p.d_v + c] = acc[c] * inv;
        p.part_lse[idx] = l > 0.f ? (m + log2f(l)) * kLn2 : kNegInf;
      }
  }
}

void prefix_merge_twin_bf16(const PrefixMergeParams& p) {
  validate_prefix_merge(p);
  const int per_head = p.d_n + p.d_v;
  std::vector<float> o_a(p.d_v), o(p.d_v), lat(p.d_c);
  for (int row = 0; row < p.rows; ++row)
    for (int h = 0; h < p.heads; ++h) {
      const size_t rh = static_cast<size_t>(row) * p.heads + h;
      for (int c = 0; c < p.d_c; ++c) lat[c] = bf16_to_float(p.o_lat[rh * p.d_c + c]);
      for (int n = 0; n < p.d_v; ++n) {
        const uint16_t* wr = p.kv_b + (static_cast<size_t>(h) * per_head + p.d_n + n) * p.d_c;
        float a = 0.f;
        for (int c = 0; c < p.d_c; ++c) a += bf16_to_float(wr[c]) * lat[c];
        o_a[n] = a;
      }
      float m = p.lse_lat[rh];
      for (int s = 0; s < p.splits; ++s) m = std::max(m, p.part_lse[static_cast<size_t>(s) * p.rows * p.heads + rh]);
      uint16_t* dst = p.out + rh * p.d_v;
      if (m == kNegInf) {
        std::fill(dst, dst + p.d_v, uint16_t{0});
        p.lse[rh] = kNegInf;
        continue;
      }
      float sum = expf(p.lse_lat[rh] - m);
      for (int s = 0; s < p.splits; ++s) sum += expf(p.part_lse[static_cast<size_t>(s) * p.rows * p.heads + rh] - m);
      const float lse = m + logf(sum);
      const float w_a = expf(p.lse_lat[rh] - lse);
      for (int n = 0; n < p.d_v; ++n) o[n] = w_a * o_a[n];
      for (int s = 0; s < p.splits; ++s) {
        const size_t idx = static_cast<size_t>(s) * p.rows * p.heads + rh;
        const float w = expf(p.part_lse[idx] - lse);
        for (int n = 0; n < p.d_v; ++n) o[n] += w * p.part_o[idx * p.d_v + n];
      }
      for (int n = 0; n < p.d_v; ++n) dst[n] = float_to_bf16(o[n]);
      p.lse[rh] = lse;
    }
}

void mixed_decode_twin_bf16(const MixedDecodeParams& p) {
  validate_mixed_decode(p);
  const Bf16DecodeParams& s = p.suffix;
  const int rows = s.batch * s.s_q;
  PrefixMergeParams mp;
  mp.o_lat = s.out;
  mp.lse_lat = s.lse;
  mp.kv_b = p.kv_b;
  mp.out = p.out;
  mp.lse = p.lse;
  mp.rows = rows;
  mp.heads = s.heads;
  mp.d_c = s.d_c;
  mp.d_n = p.d_n;
  mp.d_v = p.d_v;
  std::vector<float> part_o, part_lse;
  if (mixed_uses_prefix(p)) {
    PrefixAttnParams ap;
    ap.q = p.q_naive;
    ap.k = p.prefix_k;
    ap.v = p.prefix_v;
    ap.rows = rows;
    ap.heads = s.heads;
    ap.d_n = p.d_n;
    ap.d_r = s.d_r;
    ap.d_v = p.d_v;
    ap.prefix_len = p.prefix_len;
    ap.scale = s.scale;
    ap.splits = p.prefix_splits > 0 ? p.prefix_splits : prefix_default_splits(rows, s.heads, p.prefix_len, 132);
    part_o.resize(static_cast<size_t>(ap.splits) * rows * s.heads * p.d_v);
    part_lse.resize(static_cast<size_t>(ap.splits) * rows * s.heads);
    ap.part_o = part_o.data();
    ap.part_lse = part_lse.data();
    prefix_attn_twin_bf16(ap);
    decode_twin_bf16(s);
    mp.part_o = part_o.data();
    mp.part_lse = part_lse.data();
    mp.splits = ap.splits;
  } else {
    decode_twin_bf16(p.full);
    mp.o_lat = p.full.out;
    mp.lse_lat = p.full.lse;
  }
  prefix_merge_twin_bf16(mp);
}

}  // namespace mla::quant
