// SecondMoment::collect_bf16: the second moment of u = c / rms(c) from bfloat16 products.
//
//   sum += sum_t a_t b_t^T,  a_t = bf16(c_t) (exact for a BF16 capture), b_t = bf16(c_t * s_t),
//   s_t = 1 / (|c_t|^2 / d + eps)   (so a_t b_t^T ~ u_t u_t^T, u_t = c_t / rms(c_t))
//
// Both operands are packed as pairs of consecutive tokens (two bf16 in one 32-bit lane: the
// layout of vdpbf16ps, which adds the two products of a lane into a float32 accumulator), A in
// panels of kM rows, B in panels of kW columns, and a register-tiled kernel (kM x kW
// accumulators) runs over the tiles of the lower triangle. Block sums (<= kFloatBlock tokens)
// go to the float64 total. Products of two bf16 are exact in float32, so the only roundings
// are b_t's (8 significant bits, round to nearest even) and the float32 sums.
//
// Portable path (CPU without avx512_bf16, or forced by tests): the same packed operands widened
// to float32 and multiplied by cblas_sgemm; same products, another float32 summation order.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "calibration/stats.hpp"
#include "core/error.hpp"

// GCC 12 reports the intrinsics' internal _mm512_undefined_* values as "may be used
// uninitialized" in target("avx512...") functions; false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace mla::calib {

namespace {

constexpr int kM = 12;       // A panel rows (p) per tile
constexpr int kNV = 2;       // zmm vectors of B per tile
constexpr int kW = 16 * kNV; // B panel columns (q) per tile

std::atomic<bool> g_force_portable{false};

bool cpu_bf16() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// bf16 bits (round to nearest even) of a finite float, in the low 16 bits.
inline uint32_t rne16(uint32_t u) { return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; }

// Per-thread packed operands of one block.
struct Packed {
  int d = 0, k2 = 0, np = 0;          // width, token pairs, A panels
  std::vector<uint32_t> a;            // [np][k2][kM]
  std::vector<uint32_t> b;            // [d / kW][k2][kW]
  std::vector<uint32_t> arow;         // one pair row of A, [np * kM] (zero padded)
  std::vector<float> scale;           // s_t of the block's tokens
  void shape(int width, int pairs) {
    d = width;
    k2 = pairs;
    np = (d + kM - 1) / kM;
    a.resize(static_cast<std::size_t>(np) * k2 * kM);
    b.resize(static_cast<std::size_t>(d) * k2);
    arow.assign(static_cast<std::size_t>(np) * kM, 0u);
  }
};

template <typename Src>
float load_f(const Src* p, int64_t i) {
  if constexpr (std::is_same_v<Src, uint16_t>) return bf16_to_float(p[i]);
  else return p[i];
}

// s_t = 1 / (|c_t|^2 / d + eps), |c_t|^2 in float64 (8 partial sums).
template <typename Src>
void row_scales(const Src* c, int64_t rows, int d, double eps, std::vector<float>& s) {
  s.resize(static_cast<std::size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) {
    const Src* x = c + t * d;
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= d; i += 8)
      for (int j = 0; j < 8; ++j) {
        const double v = load_f(x, i + j);
        acc[j] += v * v;
      }
    double ss = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < d; ++i) ss += static_cast<double>(load_f(x, i)) * load_f(x, i);
    s[static_cast<std::size_t>(t)] = static_cast<float>(1.0 / (ss / d + eps));
  }
}

// Portable packing: one pair row k at a time (tokens 2k, 2k+1; the second may be absent).
template <typename Src>
void pack_portable(const Src* c, int64_t rows, Packed& P) {
  const int d = P.d;
  for (int k = 0; k < P.k2; ++k) {
    const int64_t t0 = 2 * k, t1 = 2 * k + 1;
    const float s0 = P.scale[t0], s1 = t1 < rows ? P.scale[t1] : 0.0f;
    for (int p = 0; p < d; ++p) {
      const float x0 = load_f(c, t0 * d + p), x1 = t1 < rows ? load_f(c, t1 * d + p) : 0.0f;
      P.arow[p] = rne16(f32_bits(x0)) | (rne16(f32_bits(x1)) << 16);
      const uint32_t bb = rne16(f32_bits(x0 * s0)) | (rne16(f32_bits(x1 * s1)) << 16);
      P.b[(static_cast<std::size_t>(p / kW) * P.k2 + k) * kW + p % kW] = bb;
    }
    for (int i = 0; i < P.np; ++i)
      std::memcpy(&P.a[(static_cast<std::size_t>(i) * P.k2 + k) * kM], &P.arow[i * kM], kM * sizeof(uint32_t));
  }
}

#define MLA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

MLA_AVX512_BF16 inline __m512i rne16_v(__m512i u) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
}

// AVX-512 packing (d a multiple of 16): 16 columns of a pair row per step.
template <typename Src>
MLA_AVX512_BF16 void pack_avx512(const Src* c, int64_t rows, Packed& P) {
  const int d = P.d;
  for (int k = 0; k < P.k2; ++k) {
    const int64_t t0 = 2 * k, t1 = 2 * k + 1;
    const bool has1 = t1 < rows;
    const __m512 s0 = _mm512_set1_ps(P.scale[t0]), s1 = _mm512_set1_ps(has1 ? P.scale[t1] : 0.0f);
    for (int p = 0; p < d; p += 16) {
      __m512i a, x0, x1;  // x: float32 bits of the two tokens' values
      if constexpr (std::is_same_v<Src, uint16_t>) {
        const __m512i w0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + t0 * d + p)));
        const __m512i w1 = has1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + t1 * d + p)))
                                : _mm512_setzero_si512();
        a = _mm512_or_si512(w0, _mm512_slli_epi32(w1, 16));
        x0 = _mm512_slli_epi32(w0, 16);
        x1 = _mm512_slli_epi32(w1, 16);
      } else {
        x0 = _mm512_castps_si512(_mm512_loadu_ps(c + t0 * d + p));
        x1 = has1 ? _mm512_castps_si512(_mm512_loadu_ps(c + t1 * d + p)) : _mm512_setzero_si512();
        a = _mm512_or_si512(rne16_v(x0), _mm512_slli_epi32(rne16_v(x1), 16));
      }
      const __m512i b0 = rne16_v(_mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(x0), s0)));
      const __m512i b1 = rne16_v(_mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(x1), s1)));
      const __m512i b = _mm512_or_si512(b0, _mm512_slli_epi32(b1, 16));
      _mm512_storeu_si512(&P.arow[p], a);
      _mm512_storeu_si512(&P.b[(static_cast<std::size_t>(p / kW) * P.k2 + k) * kW + p % kW], b);
    }
    for (int i = 0; i < P.np; ++i)
      std::memcpy(&P.a[(static_cast<std::size_t>(i) * P.k2 + k) * kM], &P.arow[i * kM], kM * sizeof(uint32_t));
  }
}

// acc[m][w] = sum_k dot(A pair (k, m), B pair (k, w)) for one (A panel, B panel) tile.
MLA_AVX512_BF16 void tile_bf16(const uint32_t* __restrict a, const uint32_t* __restrict b, int k2,
                               float* __restrict out /* [kM][kW] */) {
  __m512 acc[kM][kNV];
  for (int m = 0; m < kM; ++m)
    for (int v = 0; v < kNV; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int k = 0; k < k2; ++k) {
    __m512i bv[kNV];
    for (int v = 0; v < kNV; ++v) bv[v] = _mm512_loadu_si512(b + 16 * v);
    for (int m = 0; m < kM; ++m) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[m]));
      for (int v = 0; v < kNV; ++v)
        acc[m][v] = _mm512_dpbf16_ps(acc[m][v], reinterpret_cast<__m512bh>(av), reinterpret_cast<__m512bh>(bv[v]));
    }
    a += kM;
    b += kW;
  }
  for (int m = 0; m < kM; ++m)
    for (int v = 0; v < kNV; ++v) _mm512_storeu_ps(out + m * kW + 16 * v, acc[m][v]);
}

// Lower-triangle tiles of the packed block, block sums added to the float64 `sum` (row-major).
MLA_AVX512_BF16 void multiply_avx512(const Packed& P, double* sum) {
  const int d = P.d;
  alignas(64) float out[kM * kW];
  for (int j = 0; j < d / kW; ++j) {
    const uint32_t* bp = &P.b[static_cast<std::size_t>(j) * P.k2 * kW];
    for (int i = (j * kW) / kM; i < P.np; ++i) {
      tile_bf16(&P.a[static_cast<std::size_t>(i) * P.k2 * kM], bp, P.k2, out);
      for (int m = 0; m < kM; ++m) {
        const int p = i * kM + m;
        if (p >= d) break;
        const int qend = std::min(kW, p - j * kW + 1);  // lower triangle: q <= p
        double* dst = sum + static_cast<std::size_t>(p) * d + j * kW;
        for (int w = 0; w < qend; ++w) dst[w] += static_cast<double>(out[m * kW + w]);
      }
    }
  }
}

// Portable product: the packed operands widened to float32, C = A^T B by sgemm.
void multiply_portable(const Packed& P, int64_t rows, double* sum) {
  const int d = P.d;
  std::vector<float> af(static_cast<std::size_t>(rows) * d), bf(static_cast<std::size_t>(rows) * d),
      blk(static_cast<std::size_t>(d) * d);
  for (int k = 0; k < P.k2; ++k) {
    for (int p = 0; p < d; ++p) {
      const uint32_t a = P.a[(static_cast<std::size_t>(p / kM) * P.k2 + k) * kM + p % kM];
      const uint32_t b = P.b[(static_cast<std::size_t>(p / kW) * P.k2 + k) * kW + p % kW];
      for (int h = 0; h < 2; ++h) {
        const int64_t t = 2 * k + h;
        if (t >= rows) break;
        af[static_cast<std::size_t>(t) * d + p] = bf16_to_float(static_cast<uint16_t>(a >> (16 * h)));
        bf[static_cast<std::size_t>(t) * d + p] = bf16_to_float(static_cast<uint16_t>(b >> (16 * h)));
      }
    }
  }
  // blk (row-major) = A^T B: blk[p][q] = sum_t a_t[p] b_t[q].
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, static_cast<int>(rows), 1.0f, af.data(), d,
              bf.data(), d, 0.0f, blk.data(), d);
  for (int p = 0; p < d; ++p)
    for (int q = 0; q <= p; ++q)
      sum[static_cast<std::size_t>(p) * d + q] += static_cast<double>(blk[static_cast<std::size_t>(p) * d + q]);
}

template <typename Src>
void collect_block(const Src* c, int64_t rows, int d, double eps, bool fast, double* sum) {
  thread_local Packed P;
  P.shape(d, static_cast<int>((rows + 1) / 2));
  row_scales(c, rows, d, eps, P.scale);
  if (fast) {
    pack_avx512(c, rows, P);
    multiply_avx512(P, sum);
  } else {
    pack_portable(c, rows, P);
    multiply_portable(P, rows, sum);
  }
}

}  // namespace

bool SecondMoment::bf16_kernel_available() { return cpu_bf16(); }
void SecondMoment::use_portable_bf16(bool on) { g_force_portable = on; }

void SecondMoment::collect_bf16(const void* c, io::StoredType type, int64_t rows, double eps) {
  if (rows <= 0) return;
  const int d = static_cast<int>(sum.cols());
  if (type != io::StoredType::F32 && type != io::StoredType::BF16)
    throw Error("SecondMoment::collect_bf16: rows must be float32 or bfloat16");
  const bool fast = cpu_bf16() && !g_force_portable && d % kW == 0;
  const std::size_t esz = io::stored_bytes(type);
  for (int64_t r0 = 0; r0 < rows; r0 += kFloatBlock) {
    const int64_t n = std::min<int64_t>(kFloatBlock, rows - r0);
    const auto* p = static_cast<const unsigned char*>(c) + static_cast<std::size_t>(r0) * d * esz;
    if (type == io::StoredType::BF16) collect_block(reinterpret_cast<const uint16_t*>(p), n, d, eps, fast, sum.data());
    else collect_block(reinterpret_cast<const float*>(p), n, d, eps, fast, sum.data());
  }
  count += rows;
}

}  // namespace mla::calib
