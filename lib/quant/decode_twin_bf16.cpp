// CPU twin of the BF16 decode kernels (kernels/mla_decode.hpp): the same schedule, tiles and rounding points (see the
// header); only the order of fp32 additions inside a dot product differs from the tensor cores.
#include "quant/decode_twin_bf16.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/decode_split_walk.hpp"

namespace mla::quant {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string field(const char* name, long long v) {
  return std::string(name) + " = " + std::to_string(v);
}

// One split of one request: rows' normalised partial outputs and natural-log LSEs.
TwinSplit run_split(const Bf16DecodeParams& p, int b, int tile_begin, int tile_end, int tile, float max_slack) {
  const int rows = p.s_q * p.heads;
  const int dim = p.d_c + p.d_r;
  const int L = p.seqlens[b];
  const float scale_log2 = p.scale * kLog2e;
  TwinSplit r{std::vector<float>(static_cast<size_t>(rows) * p.d_c, 0.f),
                std::vector<float>(rows, kNegInf)};
  std::vector<float> q(dim), x2(tile), pb(tile);
  std::vector<const uint16_t*> krow(tile);
  for (int row = 0; row < rows; ++row) {
    const int t = row / p.heads;
    const int limit = L - (p.s_q - 1 - t);  // causal rule for s_q = 2
    const uint16_t* qsrc = p.q + (static_cast<size_t>(b) * rows + row) * dim;
    for (int i = 0; i < dim; ++i) q[i] = bf16_to_float(qsrc[i]);
    float m = kNegInf, l = 0.f;
    float* acc = r.o.data() + static_cast<size_t>(row) * p.d_c;
    for (int ti = tile_begin; ti < tile_end; ++ti) {
      const int j0 = ti * tile;
      // The kernel loads a tile only from its page; tokens >= L are zero-filled, never read.
      const uint16_t* page_base = nullptr;
      if (j0 < L) {
        const int slot = j0 / p.page_size;
        const int page = slot < p.max_pages ? p.page_table[static_cast<size_t>(b) * p.max_pages + slot] : -1;
        if (page < 0 || page >= p.num_pages)
          throw InputError("decode twin: page_table[" + std::to_string(b) + "][" + std::to_string(slot) +
                           "] = " + std::to_string(page) + " is outside [0, num_pages = " +
                           std::to_string(p.num_pages) + ") for a token the request needs");
        page_base = p.kv_cache + (static_cast<size_t>(page) * p.page_size + j0 % p.page_size) * dim;
      }
      float tmax = kNegInf;
      for (int jj = 0; jj < tile; ++jj) {
        const int j = j0 + jj;
        krow[jj] = (j < L) ? page_base + static_cast<size_t>(jj) * dim : nullptr;
        if (j >= limit) {
          x2[jj] = kNegInf;
          continue;
        }
        float s = 0.f;
        for (int i = 0; i < dim; ++i) s += q[i] * bf16_to_float(krow[jj][i]);
        x2[jj] = s * scale_log2;
        tmax = std::max(tmax, x2[jj]);
      }
      const float m_new = (tmax > m + max_slack) ? tmax : m;  // max_slack 0: std::max(m, tmax)
      const float m_use = (m_new == kNegInf) ? 0.f : m_new;  // all masked so far: avoid inf - inf
      const float alpha = exp2f(m - m_use);
      float tile_sum = 0.f;
      for (int jj = 0; jj < tile; ++jj) {
        const float pv = exp2f(x2[jj] - m_use);
        tile_sum += pv;
        pb[jj] = bf16_to_float(float_to_bf16(pv));  // P is rounded to bf16 before P.V
      }
      l = l * alpha + tile_sum;
      for (int c = 0; c < p.d_c; ++c) {
        float a = 0.f;
        for (int jj = 0; jj < tile; ++jj)
          if (krow[jj] != nullptr && pb[jj] != 0.f) a += pb[jj] * bf16_to_float(krow[jj][c]);
        acc[c] = acc[c] * alpha + a;
      }
      m = m_new;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    for (int c = 0; c < p.d_c; ++c) acc[c] *= inv;
    r.lse[row] = l > 0.f ? (m + log2f(l)) * kLn2 : kNegInf;
  }
  return r;
}

}  // namespace

DecodeWorkspaceLayout decode_workspace_layout(int batch, int s_q, int heads, int d_c, int num_parts) {
  const size_t rows = static_cast<size_t>(s_q) * heads;
  const size_t splits = decode_max_splits(batch, num_parts);
  auto align256 = [](size_t x) { return (x + 255) / 256 * 256; };
  DecodeWorkspaceLayout l;
  l.info = 0;
  l.offsets = l.info + static_cast<size_t>(num_parts) * kPartInfoInts * sizeof(int32_t);
  l.cnt = l.offsets + (static_cast<size_t>(batch) + 1) * sizeof(int32_t);
  l.lse = align256(l.cnt + static_cast<size_t>(batch) * decode_merge_row_blocks(s_q, heads) * sizeof(int32_t));
  l.o = align256(l.lse + splits * rows * sizeof(float));
  l.total = l.o + splits * rows * d_c * sizeof(float);
  return l;
}

size_t decode_workspace_bytes(int batch, int s_q, int heads, int d_c, int num_parts) {
  return decode_workspace_layout(batch, s_q, heads, d_c, num_parts).total;
}

void validate_decode_params(const Bf16DecodeParams& p) {
  auto bad = [](const std::string& what) { throw InputError("mla decode params: " + what); };
  if (!p.q) bad("q is null");
  if (!p.kv_cache) bad("kv_cache is null");
  if (!p.page_table) bad("page_table is null");
  if (!p.seqlens) bad("seqlens is null");
  if (!p.out) bad("out is null");
  if (!p.lse) bad("lse is null");
  if (p.batch < 1) bad(field("batch", p.batch) + " (must be >= 1)");
  if (p.s_q != 1 && p.s_q != 2) bad(field("s_q", p.s_q) + " (supported: 1, 2)");
  if (p.heads < 1 || p.heads > 128) bad(field("heads", p.heads) + " (supported: 1..128)");
  if (p.d_c != 32 && p.d_c != 64 && p.d_c != 128 && p.d_c != 256 && p.d_c != 512)
    bad(field("d_c", p.d_c) + " (supported: 32, 64, 128, 256, 512)");
  if (p.d_r < 16 || p.d_r > 128 || p.d_r % 16 != 0)
    bad(field("d_r", p.d_r) + " (supported: a multiple of 16 in 16..128)");
  if (p.page_size != 64 && p.page_size != 128) bad(field("page_size", p.page_size) + " (supported: 64, 128)");
  if (p.num_pages < 1) bad(field("num_pages", p.num_pages) + " (must be >= 1)");
  if (p.max_pages < 1) bad(field("max_pages", p.max_pages) + " (must be >= 1)");
  if (!(std::isfinite(p.scale) && p.scale > 0.f)) bad("scale = " + std::to_string(p.scale) + " (must be finite, > 0)");
  // the GPU grid holds the parts in its y dimension (at most 65535)
  if (p.num_parts < 0 || p.num_parts > 65535) bad(field("num_parts", p.num_parts) + " (must be in 0..65535)");
}

void decode_twin_bf16(const Bf16DecodeParams& p) {
  validate_decode_params(p);
  const DecodeTileConfig cfg = decode_tile_config_for(p);
  const TwinWalk w{p.seqlens, p.batch, p.max_pages, p.page_size, cfg.tile_tokens,
                   p.num_parts > 0 ? p.num_parts : decode_default_parts(132, p), p.s_q * p.heads, p.d_c, p.out, p.lse,
                   "decode twin"};
  run_decode_twin_walk(w, [&](int b, int t0, int t1) { return run_split(p, b, t0, t1, cfg.tile_tokens, cfg.max_slack); });
}

void cache_append_twin_bf16(const uint16_t* kv_new, int batch, int n_new, int dim, const int32_t* positions,
                            const int32_t* page_table, int max_pages, uint16_t* kv_cache, int num_pages,
                            int page_size) {
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < n_new; ++i) {
      const long long pos = static_cast<long long>(positions[b]) + i;
      const long long slot = pos / page_size;
      if (pos < 0 || slot >= max_pages)
        throw InputError("cache append: position " + std::to_string(pos) + " of request " + std::to_string(b) +
                         " is outside [0, max_pages * page_size = " +
                         std::to_string(static_cast<long long>(max_pages) * page_size) + ")");
      const int page = page_table[static_cast<size_t>(b) * max_pages + slot];
      if (page < 0 || page >= num_pages)
        throw InputError("cache append: page_table[" + std::to_string(b) + "][" + std::to_string(slot) +
                         "] = " + std::to_string(page) + " is outside [0, num_pages = " +
                         std::to_string(num_pages) + ")");
      const uint16_t* src = kv_new + (static_cast<size_t>(b) * n_new + i) * dim;
      uint16_t* dst = kv_cache + (static_cast<size_t>(page) * page_size + pos % page_size) * dim;
      std::copy(src, src + dim, dst);
    }
}

}  // namespace mla::quant
