// CPU twin of kernels/fp8_decode.cu: the same schedule, tiles, masks and rounding points (see the
// header); only the order of fp32 additions inside the two dot products differs from the tensor
// cores.
#include "quant/fp8_decode_twin.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/decode_split_walk.hpp"
#include "quant/decode_twin_bf16.hpp"

namespace mla::quant {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[i] = e4m3_to_float(static_cast<uint8_t>(i));
    return v;
  }();
  return t;
}

// One tile's tokens dequantisation inputs, read once per tile and shared by every row.
struct TileData {
  int valid = 0;                      // tokens of the tile inside [0, L) whose page is readable
  std::vector<float> x8;              // [64, d_c] e4m3 values (unscaled)
  std::vector<float> kr;              // [64, d_r] bf16 values (pre-divided)
  std::vector<float> sk;              // [64]
};

void load_tile(const Fp8DecodeParams& p, int b, int ti, TileData& t) {
  const Fp8CacheLayout l = p.layout();
  const auto& lut = e4m3_table();
  const int L = p.seqlens[b];
  const int j0 = ti * kFp8DecodeTile;
  t.valid = 0;
  if (j0 >= L) return;
  const int slot = j0 / p.page_size;
  const int page = slot < p.max_pages ? p.page_table[static_cast<size_t>(b) * p.max_pages + slot] : -1;
  if (page < 0 || page >= p.num_pages)
    throw InputError("fp8 decode twin: page_table[" + std::to_string(b) + "][" + std::to_string(slot) + "] = " +
                     std::to_string(page) + " is outside [0, num_pages = " + std::to_string(p.num_pages) +
                     ") for a token the request needs");
  const uint8_t* base = p.cache + static_cast<size_t>(page) * l.page_bytes();
  t.valid = std::min(kFp8DecodeTile, L - j0);
  for (int jj = 0; jj < t.valid; ++jj) {
    const int slot_t = (j0 + jj) % p.page_size;
    for (int c = 0; c < p.d_c; ++c) t.x8[static_cast<size_t>(jj) * p.d_c + c] = lut[base[l.latent_byte(slot_t, c)]];
    for (int c = 0; c < p.d_r; ++c) {
      uint16_t v;
      std::memcpy(&v, base + l.rope_byte(slot_t, c), 2);
      t.kr[static_cast<size_t>(jj) * p.d_r + c] = bf16_to_float(v);
    }
    std::memcpy(&t.sk[jj], base + l.scale_byte(slot_t), 4);
  }
}

TwinSplit run_split(const Fp8DecodeParams& p, int b, int tile_begin, int tile_end) {
  constexpr int T = kFp8DecodeTile;
  const int rows = p.s_q * p.heads;
  const int L = p.seqlens[b];
  const float scale_log2 = p.scale * kLog2e;
  const auto& lut = e4m3_table();
  TwinSplit r{std::vector<float>(static_cast<size_t>(rows) * p.d_c, 0.f), std::vector<float>(rows, kNegInf)};
  std::vector<float> m(rows, kNegInf), lsum(rows, 0.f), sigma(rows, 1.f);
  std::vector<float> q8(p.d_c), qr(p.d_r), x2(T), pp(T), p8(T);
  TileData tile{0, std::vector<float>(static_cast<size_t>(T) * p.d_c), std::vector<float>(static_cast<size_t>(T) * p.d_r),
                std::vector<float>(T)};
  for (int ti = tile_begin; ti < tile_end; ++ti) {
    load_tile(p, b, ti, tile);
    const int j0 = ti * T;
    for (int row = 0; row < rows; ++row) {
      const size_t qi = static_cast<size_t>(b) * rows + row;
      for (int i = 0; i < p.d_c; ++i) q8[i] = lut[p.q8[qi * p.d_c + i]];
      for (int i = 0; i < p.d_r; ++i) qr[i] = bf16_to_float(p.q_rope[qi * p.d_r + i]);
      const float rowf = p.q_scale[qi] * scale_log2;
      const int limit = std::min(L - (p.s_q - 1 - row / p.heads), j0 + tile.valid);  // causal rule, readable tokens
      float tmax = kNegInf;
      for (int jj = 0; jj < T; ++jj) {
        if (j0 + jj >= limit) {
          x2[jj] = kNegInf;
          continue;
        }
        float acc = 0.f;
        const float* xr = tile.x8.data() + static_cast<size_t>(jj) * p.d_c;
        for (int i = 0; i < p.d_c; ++i) acc += q8[i] * xr[i];
        const float* kr = tile.kr.data() + static_cast<size_t>(jj) * p.d_r;
        for (int i = 0; i < p.d_r; ++i) acc += qr[i] * kr[i];
        x2[jj] = (acc * tile.sk[jj]) * rowf;
        tmax = std::max(tmax, x2[jj]);  // NaN logits are skipped, as fmaxf does
      }
      const float m_new = std::max(m[row], tmax);
      const float m_use = (m_new == kNegInf) ? 0.f : m_new;
      const float alpha = exp2f(m[row] - m_use);
      float psum = 0.f, amax = 0.f;
      for (int jj = 0; jj < T; ++jj) {
        const bool live = j0 + jj < limit;
        const float pv = live ? exp2f(x2[jj] - m_use) : 0.f;
        psum += pv;
        pp[jj] = live ? pv * tile.sk[jj] : 0.f;
        amax = std::max(amax, pp[jj]);
      }
      const float sig = fp8_block_scale(amax, sigma[row]);
      const float inv = 1.f / sig;
      for (int jj = 0; jj < T; ++jj) p8[jj] = lut[float_to_e4m3(pp[jj] * inv)];
      const float gamma = alpha * (sigma[row] * inv);
      lsum[row] = lsum[row] * gamma + psum * inv;
      float* acc = r.o.data() + static_cast<size_t>(row) * p.d_c;
      for (int c = 0; c < p.d_c; ++c) {
        float a = 0.f;
        for (int jj = 0; jj < tile.valid; ++jj) a += p8[jj] * tile.x8[static_cast<size_t>(jj) * p.d_c + c];
        acc[c] = acc[c] * gamma + a;
      }
      sigma[row] = sig;
      m[row] = m_new;
    }
  }
  for (int row = 0; row < rows; ++row) {
    const bool empty = lsum[row] == 0.f;
    const float inv = empty ? 0.f : 1.f / lsum[row];
    float* acc = r.o.data() + static_cast<size_t>(row) * p.d_c;
    for (int c = 0; c < p.d_c; ++c) acc[c] *= inv;
    r.lse[row] = empty ? kNegInf : (m[row] + log2f(sigma[row] * lsum[row])) * kLn2;
  }
  return r;
}

std::string field(const char* name, long long v) { return std::string(name) + " = " + std::to_string(v); }

}  // namespace

void validate_fp8_decode_schedule(const Fp8DecodeParams& p) {
  auto bad = [](const std::string& what) { throw InputError("fp8 decode params: " + what); };
  if (!p.seqlens) bad("seqlens is null");
  if (p.batch < 1) bad(field("batch", p.batch) + " (must be >= 1)");
  if (p.s_q != 1 && p.s_q != 2) bad(field("s_q", p.s_q) + " (supported: 1, 2)");
  if (p.heads < 1 || p.heads > 128) bad(field("heads", p.heads) + " (supported: 1..128)");
  if (p.d_c != 32 && p.d_c != 64 && p.d_c % 128 != 0) bad(field("d_c", p.d_c) + " (supported: 32, 64 or a multiple of 128)");
  if (p.d_c > 512) bad(field("d_c", p.d_c) + " (supported: up to 512)");
  if (p.d_r != 16 && p.d_r != 32 && p.d_r != 64) bad(field("d_r", p.d_r) + " (supported: 16, 32, 64)");
  // the GPU grid holds the parts in its y dimension (at most 65535)
  if (p.num_parts < 0 || p.num_parts > 65535) bad(field("num_parts", p.num_parts) + " (must be in 0..65535)");
}

void validate_fp8_decode_params(const Fp8DecodeParams& p) {
  auto bad = [](const std::string& what) { throw InputError("fp8 decode params: " + what); };
  if (!p.q8) bad("q8 is null");
  if (!p.q_rope) bad("q_rope is null");
  if (!p.q_scale) bad("q_scale is null");
  if (!p.cache) bad("cache is null");
  if (!p.page_table) bad("page_table is null");
  if (!p.out) bad("out is null");
  if (!p.lse) bad("lse is null");
  validate_fp8_decode_schedule(p);
  if (p.page_size != 64 && p.page_size != 128) bad(field("page_size", p.page_size) + " (supported: 64, 128)");
  if (p.num_pages < 1) bad(field("num_pages", p.num_pages) + " (must be >= 1)");
  if (p.max_pages < 1) bad(field("max_pages", p.max_pages) + " (must be >= 1)");
  if (!(std::isfinite(p.scale) && p.scale > 0.f)) bad("scale = " + std::to_string(p.scale) + " (must be finite, > 0)");
}

void fp8_decode_twin(const Fp8DecodeParams& p) {
  validate_fp8_decode_params(p);
  const TwinWalk w{p.seqlens, p.batch, p.max_pages, p.page_size, kFp8DecodeTile,
                   p.num_parts > 0 ? p.num_parts : fp8_decode_default_parts(132, p), p.s_q * p.heads, p.d_c, p.out,
                   p.lse, "fp8 decode twin"};
  run_decode_twin_walk(w, [&](int b, int t0, int t1) { return run_split(p, b, t0, t1); });
}

}  // namespace mla::quant
