#pragma once
// Streaming statistics with collect / merge / finalize: sums and counts only, so memory is
// independent of the number of tokens and two runs over disjoint data merge exactly.
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.hpp"
#include "io/capture.hpp"

namespace mla::calib {

// Uncentred second moment of the per-token normalised latent u = c / rms(c):
// sum of u u^T (lower triangle kept up to date; full() mirrors it) and the token count.
struct SecondMoment {
  MatrixR sum;  // [d_c, d_c]
  int64_t count = 0;
  explicit SecondMoment(int64_t d = 0) : sum(MatrixR::Zero(d, d)) {}
  // u: [T, d_c] normalised rows (float64 dsyrk).
  void collect(const MatrixR& u);
  // u: `rows` float32 rows of width d_c, row-major. Blocks of at most kFloatBlock rows go
  // through BLAS ssyrk into a float32 block sum that is then added to the float64 `sum`:
  // twice the throughput of dsyrk and half the bytes, with float32 rounding confined to
  // sums of <= 4096 products (relative error ~1e-6 on the entries; docs/calibration.md).
  static constexpr int64_t kFloatBlock = 4096;
  void collect_f(const float* u, int64_t rows);
  // Raw latent rows c (`rows` x d_c, stored as `type`: F32 or BF16), normalised here with
  // s_t = 1 / (|c_t|^2 / d_c + eps): sum += sum_t a_t b_t^T with a_t = bf16(c_t) (exact for a
  // BF16 capture) and b_t = bf16(c_t * s_t), products exact in float32 (AVX-512 BF16 dot
  // products, vdpbf16ps), float32 sums over blocks of <= kFloatBlock rows, float64 total.
  // Twice the FP32 FMA rate; the one rounding that matters, b_t to 8 significant bits, is
  // unbiased and averages out over tokens (docs/calibration.md, "BF16 second moment").
  // Without avx512_bf16 (or with use_portable_bf16(true)) the same operands go through
  // float32 sgemm: same products, another float32 summation order.
  void collect_bf16(const void* c, io::StoredType type, int64_t rows, double eps);
  static bool bf16_kernel_available();    // the CPU has avx512_bf16 (+ avx512bw/vl)
  static void use_portable_bf16(bool on);  // tests: force the sgemm path
  void merge(const SecondMoment& o);
  // E[u u^T] (symmetric), zero when empty.
  MatrixR finalize() const;
};

// Fixed-size uniform sample of rows (Algorithm R, seeded): the FP4 / Lloyd-Max fits need the
// samples themselves, but only a bounded number of them.
struct RowReservoir {
  int64_t capacity = 0, width = 0, seen = 0;
  std::vector<float> rows;  // filled rows * width
  std::mt19937_64 rng;
  RowReservoir(int64_t cap, int64_t w, uint64_t seed) : capacity(cap), width(w), rng(seed) {}
  int64_t size() const { return static_cast<int64_t>(rows.size()) / (width ? width : 1); }
  // Counts one offered row; returns the slot the caller must fill with store(), or -1 (the
  // row is not kept, so callers transform only the rows that are kept).
  int64_t offer_slot();
  void store(int64_t slot, const double* row);
  // Merges another reservoir (same width): min(capacity, both sizes) rows, split between the
  // sides as n draws without replacement from the two streams (in proportion to `seen`), each
  // side's rows a uniform subset of its slots. `seen` adds. Deterministic for fixed seeds.
  void merge(const RowReservoir& o);
};

// Least-squares sums for z ~ mu * p (no intercept) and its R^2: z the full content logit,
// p one slice's partial logit.
struct FitSums {
  double zp = 0, pp = 0, zz = 0, z = 0;
  int64_t n = 0;
  void add(double zi, double pi) { zp += zi * pi; pp += pi * pi; zz += zi * zi; z += zi; ++n; }
  void merge(const FitSums& o) { zp += o.zp; pp += o.pp; zz += o.zz; z += o.z; n += o.n; }
  // Residual sum of squares and R^2 for a given mu (R^2 = 1 - SSE / centred SS of z).
  double sse(double mu) const { return zz - 2 * mu * zp + mu * mu * pp; }
  double r2(double mu) const;
};

// Error sums of y against reference r over many flattened outputs (SPEC section 5).
struct ErrorSums {
  double ee = 0, rr = 0, yy = 0, yr = 0;
  int64_t n = 0;
  void add(const double* y, const double* r, int64_t count);
  void merge(const ErrorSums& o) { ee += o.ee; rr += o.rr; yy += o.yy; yr += o.yr; n += o.n; }
  double rmse() const;
  double cos_diff() const;
  double rel_l2() const;
};

}  // namespace mla::calib
