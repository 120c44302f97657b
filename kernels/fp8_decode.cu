// FP8 paged decode (fp8_decode.hpp): scheduler (the BF16 decode's, 64-token tiles), split kernel,
// LSE combine (the BF16 decode's). Requests of <= 32 query rows (s_q H) take the narrow split
// kernel of kernels/fp8_decode_narrow.cu (transposed products, no 64-row padding); more rows take
// the one below.
//
// Split kernel: one CTA per (split-KV part, 64-row block); 2 consumer warpgroups + 1 producer
// warpgroup (setmaxnreg), a 2-stage ring of 64-token tiles filled with bulk copies: the format's
// pre-swizzled column blocks land in shared memory as the 128-byte (latent) and 128/64-byte
// (RoPE) swizzled K-major layouts wgmma reads (4 + 1 copies of 8 KB and one of 256 B of scales
// per tile at d_c = 512). Per tile:
//   warpgroup 0: S = Q8 K8^T (wgmma m64n64k32 e4m3, d_c / 32 steps) + Q_rope K_rope^T (wgmma
//        m64n64k16 bf16) into one fp32 accumulator (both parts live in the s_q s_k units of the
//        format); online softmax with s_k folded into P and P re-quantised per tile (the twin's
//        rounding points); P8 stays in registers as the A operand of its P.V, and is handed to
//        warpgroup 1 through shared memory as the registers themselves: the wgmma A fragment
//        depends only on a thread's index in its warpgroup, so thread t of warpgroup 1 needs
//        exactly thread t of warpgroup 0's 8 registers (and its 2 rows' rescale factors);
//   both: V^T of their d_c / 2 channels (FP8 wgmma cannot transpose an 8-bit B operand, see
//        transpose_half and docs/formats/kv-fp8.md; warpgroup 1 does it while warpgroup 0
//        computes S), then O[:, half] = O gamma + P8 V8^T (wgmma m64n(d_c/2)k32 e4m3, A from
//        registers).
#include "kernels/fp8_decode.hpp"

#include <cuda_fp8.h>

#include <string>

#include "core/error.hpp"
#include "kernels/decode_device.cuh"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_store.cuh"
#include "kernels/fp8_append.hpp"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_wgmma.cuh"
#include "kernels/mla_decode.hpp"
#include "kernels/wgmma_ops.cuh"
#include "quant/fp4_cache_format.hpp"

namespace mla::kernels {
namespace {

using quant::kPartInfoInts;
using fp8::desc_sw;
using fp8::kT;
using fp8::lds32;
using fp8::pack_e4m3;
using fp8::sts32;
constexpr int kStages = 2;
constexpr int kThreads = 384;

template <int DC, int DR>
struct Cfg {
  static constexpr int kNHalf = DC / 2;       // O columns per warpgroup
  static constexpr int kOReg = kNHalf / 2;    // fp32 accumulators per thread
  static constexpr int kRB = 2 * DR;          // rope row bytes (64 or 128)
  static constexpr int kRMode = kRB == 128 ? 1 : 2;  // descriptor swizzle mode: 128 B or 64 B
  static constexpr uint32_t kRSbo = 8 * kRB;  // 8-row swizzle atom
  static constexpr uint32_t kQ8 = 64 * DC;
  static constexpr uint32_t kQR = 64 * kRB;
  static constexpr uint32_t kStage = fp8::StageBytes<DC, DR>::kAligned;
  static constexpr uint32_t kVt = DC * 128;  // V^T: one 128-byte row per channel, 64 bytes used
  static constexpr uint32_t kXchg = 10 * 128 * 4;  // warpgroup 0 -> 1: 8 P registers + 2 row factors per thread
  static constexpr size_t smem() { return 1024 + kQ8 + kQR + kStages * kStage + kVt + kXchg + 8 * 2 * kStages; }
};

// Writes V^T for channels [c0, c0 + NH) of a tile into vt (K-major, 128-byte rows and swizzle):
// row c - c0 holds the tile's tokens in the order k' the A fragment of the S accumulator uses.
// wgmma's 8-bit A fragment gives thread (g, tq) the k values 4 tq .. 4 tq + 3 and 16 + 4 tq .. in
// registers a0 (row g) / a2, and its m64n64 accumulator holds columns 8 n + 2 tq + {0, 1}; so
// k' = 16 half + 4 tq + e (per 32-token k-step) is token 16 half + 8 (e >> 1) + 2 tq + (e & 1)
// and P needs no shuffle. Tokens >= valid are written as 0 (their bytes may be NaN).
template <int NH>
__device__ __forceinline__ void transpose_half(uint32_t tile, uint32_t vt, int c0, int valid, int t) {
  for (int idx = t; idx < (NH / 4) * 16; idx += 128) {
    const int q4 = idx & 15, c = c0 + 4 * (idx >> 4);
    const int tb = 32 * (q4 >> 3) + 16 * ((q4 & 7) >> 2) + 2 * (q4 & 3);
    const int tok[4] = {tb, tb + 1, tb + 8, tb + 9};
    uint32_t v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int T = tok[e];
      const uint32_t a = tile + (c >> 7) * 8192 + T * 128 + ((((c & 127) >> 4) ^ (T & 7)) << 4) + (c & 15);
      v[e] = T < valid ? lds32(a) : 0u;
    }
    uint32_t o[4];
    fp8::transpose4x4(v, o);
    const int kp = 4 * q4;
#pragma unroll
    for (int ci = 0; ci < 4; ++ci) {
      const int r = c - c0 + ci;
      sts32(vt + r * 128 + (((kp >> 4) ^ (r & 7)) << 4) + (kp & 15), o[ci]);
    }
  }
}

template <int DC, int DR>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_split_kernel(const quant::Fp8DecodeParams p, const quant::Bf16DecodeParams po, const int32_t* __restrict__ info,
                     const int32_t* __restrict__ offsets, float* __restrict__ o_acc, float* __restrict__ lse_acc) {
  using C = Cfg<DC, DR>;
  constexpr int S = kStages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const unsigned char* gbase = smem_raw + (base - raw);
  const uint32_t sQ8 = base, sQR = sQ8 + C::kQ8, sSt = sQR + C::kQR, sVt = sSt + S * C::kStage;
  uint32_t* xchg = reinterpret_cast<uint32_t*>(smem_raw + (base - raw) + (sVt + C::kVt - base));  // [10][128]
  const uint32_t bar0 = sVt + C::kVt + C::kXchg;  // full[s] at bar0 + 8 s, empty[s] at bar0 + 8 (S + s)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      detail::mbar_init(bar0 + 8 * s, 1);
      detail::mbar_init(bar0 + 8 * (S + s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int32_t* in = info + blockIdx.y * kPartInfoInts;  // grid: detail::split_grid
  const int end_b = in[2], end_t = in[3];
  const int rows = p.s_q * p.heads;
  const int row0 = blockIdx.x * 64;

  if (warp >= 8) {  // ---- producer: one thread issues the bulk copies ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8 && lane == 0) fp8::produce_tiles<DC, DR, S>(p, in, sSt, bar0);
    return;
  }
  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int wg = warp / 4, wiw = warp % 4, ctid = threadIdx.x, wtid = threadIdx.x % 128;
  const int g = lane / 4, tq = lane % 4;
  const float scale_log2 = p.scale * detail::kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  // Named barriers of the warpgroup 0 -> 1 hand-over (256 threads each): kReady, warpgroup 0
  // arrives once the slot is written and warpgroup 1 waits; kFree, the reverse. Warpgroup 1
  // arrives on kFree once before the first message, warpgroup 0 waits on it once after the last,
  // so every phase of both completes.
  constexpr int kReady = 4, kFree = 5;
  auto send = [&](const uint32_t (&v)[10]) {  // warpgroup 0
    detail::named_bar_sync(kFree, 256);
#pragma unroll
    for (int i = 0; i < 10; ++i) xchg[i * 128 + wtid] = v[i];
    asm volatile("bar.arrive %0, %1;\n" ::"r"(kReady), "r"(256) : "memory");
  };
  auto receive = [&](uint32_t (&v)[10]) {  // warpgroup 1
    detail::named_bar_sync(kReady, 256);
#pragma unroll
    for (int i = 0; i < 10; ++i) v[i] = xchg[i * 128 + wtid];
    asm volatile("bar.arrive %0, %1;\n" ::"r"(kFree), "r"(256) : "memory");
  };
  if (wg == 1) asm volatile("bar.arrive %0, %1;\n" ::"r"(kFree), "r"(256) : "memory");
  int grow[2], lim_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    grow[h] = row0 + wiw * 16 + g + 8 * h;
    lim_off[h] = p.s_q - 1 - min(grow[h] / p.heads, p.s_q - 1);
  }
  int split = in[4];
  int it = 0;
  for (int b = in[0], t = in[1]; b < end_b || (b == end_b && t < end_t); ++b, t = 0, ++split) {
    const int L = p.seqlens[b];
    const int stop = (b == end_b) ? end_t : quant::decode_tiles(L, kT);
    const int n_split = offsets[b + 1] - offsets[b];
    const int32_t* ptab = p.page_table + static_cast<size_t>(b) * p.max_pages;
    // ---- this request's 64 query rows: q8 and q_rope into the swizzled K-major layouts ----
    detail::named_bar_sync(1, 256);  // both warpgroups are done with the previous request's Q
    fp8::load_query<DC, DR, 64>(p, b, rows, row0, sQ8, sQR, ctid, 256);
    detail::named_bar_sync(1, 256);
    float rowf[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) rowf[h] = grow[h] < rows ? p.q_scale[static_cast<size_t>(b) * rows + grow[h]] * scale_log2 : 0.f;
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f}, sig[2] = {1.f, 1.f};  // warpgroup 0
    float acc[C::kOReg];
#pragma unroll
    for (int i = 0; i < C::kOReg; ++i) acc[i] = 0.f;

    for (int ti = t; ti < stop; ++ti, ++it) {
      const int stage = it % S;
      const uint32_t st = sSt + stage * C::kStage;
      const int j0 = ti * kT;
      const int slot = j0 / p.page_size;
      const int page = (j0 < L && slot < p.max_pages) ? ptab[slot] : -1;
      const int valid = (page >= 0 && page < p.num_pages) ? min(kT, L - j0) : 0;
      detail::mbar_wait(bar0 + 8 * stage, (it / S) & 1);
      uint32_t msg[10];  // P8 A fragments of the two k-steps, then the two rows' gamma
      if (wg == 0) {
        // ---- S = Q8 K8^T + Q_rope K_rope^T ----
        float sv[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          sv[i] = 0.f;
          gmma::fence_operand(sv[i]);
        }
        // descriptors: one base each, k-steps by constant adds (detail::gmma_desc_at)
        const uint64_t dq = desc_sw(sQ8, 1024, 1), dt = desc_sw(st, 1024, 1);
        const uint64_t dqr = desc_sw(sQR, C::kRSbo, C::kRMode), dtr = desc_sw(st + 64 * DC, C::kRSbo, C::kRMode);
        gmma::fence();
#pragma unroll
        for (int kk = 0; kk < DC / 32; ++kk) {
          const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
          fp8::ss_e4m3_n64(sv, detail::gmma_desc_at(dq, off), detail::gmma_desc_at(dt, off));
        }
#pragma unroll
        for (int kk = 0; kk < DR / 16; ++kk)
          gmma::wgmma_ss_n64(sv, detail::gmma_desc_at(dqr, kk * 32), detail::gmma_desc_at(dtr, kk * 32));
        gmma::commit();
        gmma::wait<0>();
#pragma unroll
        for (int i = 0; i < 32; ++i) gmma::fence_operand(sv[i]);
        // ---- online softmax, s_k folded into P, P re-quantised per tile ----
        const float* sk = reinterpret_cast<const float*>(gbase + (st - base) + 64 * (DC + C::kRB));
        int lim[2];
        float tmax[2] = {neg_inf, neg_inf};
#pragma unroll
        for (int h = 0; h < 2; ++h) lim[h] = min(L - lim_off[h], j0 + valid);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int h = (i >> 1) & 1, jj = (i >> 2) * 8 + 2 * tq + (i & 1);
          const float x = (j0 + jj < lim[h]) ? (sv[i] * sk[jj]) * rowf[h] : neg_inf;
          sv[i] = x;
          tmax[h] = fmaxf(tmax[h], x);
        }
        float m_use[2], alpha[2], psum[2] = {0.f, 0.f}, amax[2] = {0.f, 0.f};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
          tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
          const float m_new = fmaxf(m_run[h], tmax[h]);
          m_use[h] = (m_new == neg_inf) ? 0.f : m_new;
          alpha[h] = exp2f(m_run[h] - m_use[h]);
          m_run[h] = m_new;
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int h = (i >> 1) & 1, jj = (i >> 2) * 8 + 2 * tq + (i & 1);
          const bool live = j0 + jj < lim[h];
          const float pv = live ? exp2f(sv[i] - m_use[h]) : 0.f;
          psum[h] += pv;
          const float pp = live ? pv * sk[jj] : 0.f;
          amax[h] = fmaxf(amax[h], pp);
          sv[i] = pp;
        }
        float gamma[2], inv[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
          amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));
          const float sg = amax[h] > 0.f ? amax[h] / quant::kFp8CacheMax : sig[h];
          inv[h] = 1.f / sg;
          gamma[h] = alpha[h] * (sig[h] * inv[h]);
          l_run[h] = l_run[h] * gamma[h] + psum[h] * inv[h];
          sig[h] = sg;
        }
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const int n0 = 4 * kk + 2 * hf;  // accumulator column blocks n0, n0 + 1
              msg[4 * kk + h + 2 * hf] =
                  pack_e4m3(sv[4 * n0 + 2 * h] * inv[h], sv[4 * n0 + 2 * h + 1] * inv[h],
                            sv[4 * (n0 + 1) + 2 * h] * inv[h], sv[4 * (n0 + 1) + 2 * h + 1] * inv[h]);
            }
        msg[8] = __float_as_uint(gamma[0]);
        msg[9] = __float_as_uint(gamma[1]);
        send(msg);
      }
      // ---- V^T of this warpgroup's channels (warpgroup 1: while warpgroup 0 computes S);
      // then the stage is free ----
      const uint32_t vt = sVt + wg * C::kNHalf * 128;
      transpose_half<C::kNHalf>(st, vt, wg * C::kNHalf, valid, wtid);
      detail::fence_proxy_async();
      detail::named_bar_sync(2 + wg, 128);
      __syncwarp();
      if (lane == 0) detail::mbar_arrive(bar0 + 8 * (S + stage));
      if (wg == 1) receive(msg);
      // ---- O = O * gamma + P8 V8 over this warpgroup's d_c / 2 columns ----
      const float gm[2] = {__uint_as_float(msg[8]), __uint_as_float(msg[9])};
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) {
        acc[i] *= gm[(i >> 1) & 1];
        gmma::fence_operand(acc[i]);
      }
      const uint32_t pa0[4] = {msg[0], msg[1], msg[2], msg[3]}, pa1[4] = {msg[4], msg[5], msg[6], msg[7]};
      gmma::fence();
      fp8::rs_e4m3<C::kNHalf>(acc, pa0, desc_sw(vt, 1024, 1));
      fp8::rs_e4m3<C::kNHalf>(acc, pa1, desc_sw(vt + 32, 1024, 1));
      gmma::commit();
      gmma::wait<0>();
#pragma unroll
      for (int i = 0; i < C::kOReg; ++i) gmma::fence_operand(acc[i]);
    }
    // ---- epilogue: o / l, lse = (m + log2(sigma l)) ln 2 (warpgroup 0 sends 1/l and lse) ----
    uint32_t fin[10] = {};
    if (wg == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const bool empty = l == 0.f;
        fin[h] = __float_as_uint(empty ? 0.f : 1.f / l);
        fin[2 + h] = __float_as_uint(empty ? neg_inf : (m_run[h] + log2f(sig[h] * l)) * detail::kLn2);
      }
      send(fin);
    } else {
      receive(fin);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (grow[h] < rows)
        detail::store_row(
            po, o_acc, lse_acc, b, split, n_split, grow[h], wg * C::kNHalf + 2 * tq, C::kNHalf / 8,
            [&](int n) { return make_float2(acc[4 * n + 2 * h], acc[4 * n + 2 * h + 1]); },
            __uint_as_float(fin[h]), __uint_as_float(fin[2 + h]), wg == 0 && tq == 0);
    }
  }
  if (wg == 0) detail::named_bar_sync(kFree, 256);  // the last phase warpgroup 1 opened
}

// The BF16 decode's parameter block for what the FP8 decode shares with it: the output, the
// workspace carving, the store and the combine.
quant::Bf16DecodeParams output_shim(const quant::Fp8DecodeParams& p, int parts) {
  quant::Bf16DecodeParams s;
  s.out = p.out;
  s.lse = p.lse;
  s.seqlens = p.seqlens;
  quant::set_decode_shape(s, p.batch, p.s_q, p.heads, p.d_c, p.d_r, p.num_pages, p.page_size, p.max_pages, p.scale);
  s.num_parts = parts;
  s.workspace = p.workspace;
  s.workspace_bytes = p.workspace_bytes;
  s.error_flag = p.error_flag;
  return s;
}

template <int DC, int DR>
void launch_split(const quant::Fp8DecodeParams& p, const quant::Bf16DecodeParams& po, const detail::Workspace& w,
                  int parts, cudaStream_t stream) {
  static bool smem_set = false;
  const size_t smem = Cfg<DC, DR>::smem();
  cuda::set_smem_limit_once(fp8_split_kernel<DC, DR>, smem, smem_set, "fp8 decode split kernel smem limit");
  const dim3 grid = detail::split_grid(parts, quant::fp8_decode_row_blocks(p));
  fp8_split_kernel<DC, DR><<<grid, kThreads, smem, stream>>>(p, po, w.info, w.offsets, w.o_acc, w.lse_acc);
  cuda::check(cudaGetLastError(), "fp8 decode split launch", "mla decode");
}

template <int DR>
void launch_split_dc(const quant::Fp8DecodeParams& p, const quant::Bf16DecodeParams& po, const detail::Workspace& w,
                     int parts, cudaStream_t stream) {
  if (p.d_c == 128) launch_split<128, DR>(p, po, w, parts, stream);
  else if (p.d_c == 256) launch_split<256, DR>(p, po, w, parts, stream);
  else launch_split<512, DR>(p, po, w, parts, stream);
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

bool fp8_decode_shape_supported(const quant::Fp8DecodeParams& p) {
  return (p.d_c == 128 || p.d_c == 256 || p.d_c == 512) && (p.d_r == 32 || p.d_r == 64);
}

int fp8_decode_parts_for_device(const quant::Fp8DecodeParams& p) { return quant::fp8_decode_default_parts(cuda::sm_count(), p); }

size_t fp8_decode_workspace_bytes(const quant::Fp8DecodeParams& p, bool with_query) {
  const int parts = p.num_parts > 0 ? p.num_parts : fp8_decode_parts_for_device(p);
  size_t n = align256(quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts));
  if (with_query) {
    const size_t rows = static_cast<size_t>(p.batch) * p.s_q * p.heads;
    n += align256(rows * p.d_c) + align256(rows * p.d_r * 2) + align256(rows * 4);
  }
  return n;
}

namespace {
// fp8_decode's body; fp4_cache: p.cache holds FP4 pages for the narrow kernel's FP4 route.
void decode_impl(const quant::Fp8DecodeParams& p_in, cudaStream_t stream, bool fp4_cache) {
  quant::validate_fp8_decode_params(p_in);
  if (!fp8_decode_shape_supported(p_in))
    throw InputError("fp8 decode params: (d_c, d_r) = (" + std::to_string(p_in.d_c) + ", " + std::to_string(p_in.d_r) +
                     ") has no GPU kernel (supported: d_c 128, 256, 512 with d_r 32 or 64; the CPU twin takes more)");
  quant::Fp8DecodeParams p = p_in;
  const int parts = p.num_parts > 0 ? p.num_parts : fp8_decode_parts_for_device(p);
  p.num_parts = parts;
  const size_t need = quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("fp8 decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " for this shape; see fp8_decode_workspace_bytes)");
  const quant::Bf16DecodeParams po = output_shim(p, parts);
  const detail::Workspace w = detail::carve(po);
  decode_schedule_on_device(p.seqlens, p.batch, kT, parts, w.info, w.offsets, stream);
  if (p.s_q * p.heads <= fp8::kNarrowRows) fp8::launch_narrow(p, w, parts, stream, fp4_cache);
  else if (p.d_r == 64) launch_split_dc<64>(p, po, w, parts, stream);
  else launch_split_dc<32>(p, po, w, parts, stream);
  detail::launch_combine(po, w, stream);
}

void decode_bf16q_impl(const quant::Fp8DecodeParams& p_in, const uint16_t* q, cudaStream_t stream, bool fp4_cache) {
  quant::Fp8DecodeParams p = p_in;
  if (p.num_parts == 0 && p.batch > 0 && p.heads > 0) p.num_parts = fp8_decode_parts_for_device(p);
  const size_t need = fp8_decode_workspace_bytes(p, true);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("fp8 decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " with the query; see fp8_decode_workspace_bytes(p, true))");
  const size_t rows = static_cast<size_t>(p.batch) * p.s_q * p.heads;
  char* ws = static_cast<char*>(p.workspace);
  size_t off = align256(quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, p.num_parts));
  uint8_t* q8 = reinterpret_cast<uint8_t*>(ws + off);
  off += align256(rows * p.d_c);
  uint16_t* q_rope = reinterpret_cast<uint16_t*>(ws + off);
  off += align256(rows * p.d_r * 2);
  float* q_scale = reinterpret_cast<float*>(ws + off);
  p.q8 = q8;
  p.q_rope = q_rope;
  p.q_scale = q_scale;
  quant::validate_fp8_decode_params(p);
  fp8_quantize_query(q, static_cast<int>(rows), p.d_c, p.d_r, q8, q_rope, q_scale, stream);
  decode_impl(p, stream, fp4_cache);
}
}  // namespace

void fp8_decode(const quant::Fp8DecodeParams& p, cudaStream_t stream) { decode_impl(p, stream, false); }

void fp8_decode_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream) {
  decode_bf16q_impl(p, q, stream, false);
}

void fp8_decode_fp4_cache_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream) {
  auto bad = [](const std::string& what) { throw InputError("fp8 decode of an FP4 cache: " + what); };
  if (p.s_q * p.heads > fp8::kNarrowRows)
    bad("s_q * heads = " + std::to_string(p.s_q * p.heads) + " query rows (the FP8 route takes <= " +
        std::to_string(fp8::kNarrowRows) + "; the BF16 route, kernels/kv4_decode.hpp, takes any)");
  quant::validate_fp4_layout(quant::Fp4CacheLayout{p.page_size, p.d_c, p.d_r});
  if (p.page_size % quant::kFp8DecodeTile != 0)
    bad("page_size = " + std::to_string(p.page_size) + " (a multiple of " + std::to_string(quant::kFp8DecodeTile) + ")");
  decode_bf16q_impl(p, q, stream, true);
}

}  // namespace mla::kernels
