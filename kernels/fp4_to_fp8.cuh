#pragma once
// The FP8-tensor-core route of the FP4 cache (kernels/fp8_decode_narrow.cu and
// fp8_decode_rows64.cu with an FP4 cache): one thread of the FP8 kernel brings each 64-token tile
// of FP4 pages into a raw ring (bulk copies) and its converting warps (narrow: warpgroups 1-3;
// 64-row: 1-2) rewrite it in shared memory as the FP8 tile the consumers read: an FP8 page of 64
// tokens (quant/fp8_cache_layout.hpp), per token
//   E = max(max_g b_g - 127, -40), s = 2^(E - 6), x8 = E4M3(e2m1 * 2^(b_g - 127 - E + 6)),
//   k_pe' = BF16(k_pe * 2^(6 - E)); poisoned tokens (a scale byte 255): scale NaN, zeros.
// quant::fp4_cache_to_fp8 is the CPU twin (quant/fp4_to_fp8.hpp), byte for byte.
#include <cuda_fp8.h>

#include "kernels/decode_device.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "quant/fp4_cache_layout.hpp"
#include "quant/fp4_to_fp8.hpp"

namespace mla::kernels::fp8 {

// E4M3 bytes of e2m1 magnitudes {0, .5, 1, 1.5} (t0) and {2, 3, 4, 6} (t1) times 2^k (k <= 6).
// For k in [-5, 6] every product is an E4M3 normal: the k = 0 bytes (0x30 0.5, 0x38 1, 0x3C 1.5,
// 0x40 2, 0x44 3, 0x48 4, 0x4C 6) with k added to the exponent field, no conversion. Below, the
// products round (subnormals, zero): converted from fp32 (2^k as bits; 0 below 2^-126, where
// every product rounds to an E4M3 zero anyway), as the twin's E4M3 encoder rounds them.
// e2m1_e4m3_tables_exact: the k >= -5 tables alone (exponent arithmetic, no branch).
__device__ __forceinline__ void e2m1_e4m3_tables_exact(int k, uint32_t& t0, uint32_t& t1) {
  t0 = 0x3C383000u + static_cast<uint32_t>(8 * k) * 0x01010100u;
  t1 = 0x4C484440u + static_cast<uint32_t>(8 * k) * 0x01010101u;
}
__device__ __forceinline__ void e2m1_e4m3_tables(int k, uint32_t& t0, uint32_t& t1) {
  if (k >= -5) {
    e2m1_e4m3_tables_exact(k, t0, t1);
  } else {
    const float f = k >= -126 ? __int_as_float((k + 127) << 23) : 0.f;
    t0 = pack_e4m3(0.f, 0.5f * f, f, 1.5f * f);
    t1 = pack_e4m3(2.f * f, 3.f * f, 4.f * f, 6.f * f);
  }
}

// Scale bytes of one token, kGroups of them (4, 8 or 16 at d_c 128, 256, 512), loaded as words.
template <int kGroups>
struct ScaleRow {
  uint32_t w[kGroups / 4];
  // The bytes as 16-bit lanes (even bytes masked, odd ones moved down by a byte permute) under
  // max.u16x2 (__vmaxu2: one instruction on sm_90, where __vmaxu4 is emulated in about twelve).
  __device__ __forceinline__ uint32_t max_byte() const {
    uint32_t m = __vmaxu2(w[0] & 0x00FF00FFu, __byte_perm(w[0], 0u, 0x4341));
#pragma unroll
    for (int i = 1; i < kGroups / 4; ++i) m = __vmaxu2(m, __vmaxu2(w[i] & 0x00FF00FFu, __byte_perm(w[i], 0u, 0x4341)));
    return max(m & 0xFFFFu, m >> 16);
  }
};

// prmt.b32 in its generic mode, which __byte_perm does not expose: bit 3 of a selector nibble
// replicates the selected byte's most significant bit over the result byte (0x00 or 0xFF).
__device__ __forceinline__ uint32_t prmt_sign(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Eight E2M1 codes (element i in nibble i: element 2j in the low nibble of byte j) -> eight E4M3
// bytes (two words, element order), in nine instructions. Magnitudes: with the sign bits cleared,
// nibble i is element i's 3-bit index into (t0, t1), and a byte permute reads the four low
// nibbles of its selector, so two permutes give the magnitudes in element order. Signs: element
// i's sign bit is bit 3 of nibble i, i.e. the most significant bit of byte i / 2 of x (odd i) or of
// x << 4 (even i); a sign-replicating permute of (x << 4, x) spreads each onto its own byte, and
// one LOP3 keeps bit 7 of it beside the magnitude (whose bit 7 is clear: every table byte <= 0x7C).
__device__ __forceinline__ uint2 e2m1x8_to_e4m3(uint32_t x, uint32_t t0, uint32_t t1) {
  const uint32_t m = x & 0x77777777u;
  const uint32_t lo = __byte_perm(t0, t1, m), hi = __byte_perm(t0, t1, m >> 16);
  const uint32_t y = x << 4;
  // byte k of the result <- sign of element k (lo) / 4 + k (hi): y byte 0, x byte 0, y byte 1, x byte 1, ...
  const uint32_t slo = prmt_sign(y, x, 0xD9C8u), shi = prmt_sign(y, x, 0xFBEAu);
  return make_uint2(lo | (slo & 0x80808080u), hi | (shi & 0x80808080u));
}

// One 64-token tile: raw (an FP4 page of 64 tokens, Fp4CacheLayout{64, DC, DR}) -> dst (an FP8 page of 64
// tokens), in kShares shares of 64 threads: thread (T, h) converts token T's groups h, h + kShares, ... and
// its RoPE chunks kShares - 1 - h, 2 kShares - 1 - h, ... (the shares that have one group fewer take the
// extra RoPE chunks); share 0 writes the token's scale. A thread's offsets inside both tiles are the same
// for every tile, so they are computed once (the constructor) and a tile's conversion is loads, tables,
// permutes and stores. With the poison fast path and the rebalanced shares below, a narrow-kernel P.V
// warp's conversion fell from ~348 to ~280 instructions a tile (docs/gpu-notes.md, session 24). The
// layouts' section_byte (quant/fp8_cache_layout.hpp), with the per-token parts hoisted: in a section of
// w-byte rows (w <= 128, a power of two), byte x < w of token T sits at T w + (x ^ sw), sw = (((T w) >> 7)
// & (w / 16 - 1)) << 4 the token's swizzle, the same for every chunk of the row; wider rows are blocks of
// 128 (64 rows each). 32-bit offsets: the layouts' size_t arithmetic cost as many instructions as the
// conversion itself.
template <int DC, int DR, int kShares, bool kKeepOffsets = true>
struct Fp4TileConverter {
  static constexpr int kDC = DC, kDR = DR;
  static constexpr int kGroups = DC / 32, kRopeChunks = 2 * DR / 16;
  static constexpr int kTrips = (kGroups + kShares - 1) / kShares;  // groups of the busiest share
  static constexpr int kRopeTrips = (kRopeChunks + kShares - 1) / kShares;
  static constexpr uint32_t kCW = DC / 2 < 128 ? DC / 2 : 128, kRW = 2 * DR, kSR = DC / 32;  // row widths
  static constexpr uint32_t kRawScale = quant::Fp4CacheLayout{64, DC, DR}.scale_offset();
  static constexpr uint32_t kRawRope = quant::Fp4CacheLayout{64, DC, DR}.rope_offset();
  static constexpr uint32_t kDstRope = quant::Fp8CacheLayout{64, DC, DR}.rope_offset();
  static constexpr uint32_t kDstScale = quant::Fp8CacheLayout{64, DC, DR}.scale_offset();

  // The thread's offsets in both tiles.
  struct Offsets {
    uint32_t code[kTrips];      // group h + k kShares's 16 code bytes in the raw tile (a valid group's
                                // where the share has none)
    uint32_t lat[kTrips];       // its first 16 E4M3 bytes in the FP8 tile (the other 16 at lat ^ 16)
    uint32_t rope[kRopeTrips];  // RoPE chunk kShares (m + 1) - 1 - h of the token, inside the section (both layouts)
    uint32_t srow;              // the token's scale row in the raw tile (group c's byte at srow + c)
  };

  int T, h;
  // kKeepOffsets: computed once, in registers for the converter's life; otherwise every tile
  // (the 64-row kernel's P.V warps hold 128 accumulators: kept, they spilled).
  Offsets kept;

  // Share h's k-th group and m-th RoPE chunk (they exist below kGroups / kRopeChunks), and a
  // compile-time check that the shares cover every group and chunk of a token exactly once.
  static constexpr int group_of(int h, int k) { return h + k * kShares; }
  static constexpr int rope_chunk_of(int h, int m) { return kShares * (m + 1) - 1 - h; }
  static constexpr bool covers_each_once() {
    int groups[kGroups] = {}, chunks[kRopeChunks] = {};
    for (int s = 0; s < kShares; ++s) {
      for (int k = 0; k < kTrips; ++k)
        if (group_of(s, k) < kGroups) ++groups[group_of(s, k)];
      for (int m = 0; m < kRopeTrips; ++m)
        if (rope_chunk_of(s, m) >= 0 && rope_chunk_of(s, m) < kRopeChunks) ++chunks[rope_chunk_of(s, m)];
    }
    for (int g : groups)
      if (g != 1) return false;
    for (int c : chunks)
      if (c != 1) return false;
    return true;
  }
  static_assert(covers_each_once(), "fp4 conversion: the shares must write every group and RoPE chunk once");

  // Group k / chunk m of this share exists (the last trip is partial where kShares does not divide
  // the count; trips every share has are constant true).
  __device__ __forceinline__ bool has_group(int k) const {
    return (k + 1) * kShares <= kGroups || group_of(h, k) < kGroups;
  }
  __device__ __forceinline__ bool has_rope(int m) const {
    return (m + 1) * kShares <= kRopeChunks || rope_chunk_of(h, m) < kRopeChunks;
  }

  __device__ __forceinline__ Fp4TileConverter(int T_, int h_) : T(T_), h(h_) {
    if constexpr (kKeepOffsets) {
#pragma unroll
      for (int k = 0; k < kTrips; ++k) kept.code[k] = code_of(k), kept.lat[k] = lat_of(k);
#pragma unroll
      for (int m = 0; m < kRopeTrips; ++m) kept.rope[m] = rope_of(m);
      kept.srow = srow_of();
      // Opaque to the optimiser: otherwise it recomputes them from T and h in every tile.
#pragma unroll
      for (int k = 0; k < kTrips; ++k) asm("" : "+r"(kept.code[k]), "+r"(kept.lat[k]));
#pragma unroll
      for (int m = 0; m < kRopeTrips; ++m) asm("" : "+r"(kept.rope[m]));
      asm("" : "+r"(kept.srow));
    }
  }

  // The offsets: computed (the *_of functions), or read from kept (the *_at functions, which
  // compute each where it is used when nothing is kept).
  __device__ __forceinline__ uint32_t code_of(int k) const {
    const uint32_t t = static_cast<uint32_t>(T), code_sw = (((t * kCW) >> 7) & (kCW / 16 - 1)) << 4;
    const uint32_t ci = 16 * static_cast<uint32_t>(min(group_of(h, k), kGroups - 1));
    return t * kCW + (ci / kCW) * (64 * kCW) + ((ci % kCW) ^ code_sw);
  }
  __device__ __forceinline__ uint32_t lat_of(int k) const {
    // bytes li and li + 16 of the row: li % 128 is a multiple of 32, so the second chunk is the
    // first's with bit 4 set, after the swizzle as before it
    const uint32_t t = static_cast<uint32_t>(T), lat_sw = (t & 7) << 4;
    const uint32_t li = 32 * static_cast<uint32_t>(min(group_of(h, k), kGroups - 1));
    return t * 128 + (li / 128) * 8192 + ((li % 128) ^ lat_sw);
  }
  __device__ __forceinline__ uint32_t rope_of(int m) const {
    const uint32_t t = static_cast<uint32_t>(T), rope_sw = (((t * kRW) >> 7) & (kRW / 16 - 1)) << 4;
    const uint32_t q = static_cast<uint32_t>(min(rope_chunk_of(h, m), kRopeChunks - 1));
    return t * kRW + ((16 * q) ^ rope_sw);
  }
  __device__ __forceinline__ uint32_t srow_of() const { return kRawScale + static_cast<uint32_t>(T) * kSR; }
  __device__ __forceinline__ uint32_t code_at(int k) const { return kKeepOffsets ? kept.code[k] : code_of(k); }
  __device__ __forceinline__ uint32_t lat_at(int k) const { return kKeepOffsets ? kept.lat[k] : lat_of(k); }
  __device__ __forceinline__ uint32_t rope_at(int m) const { return kKeepOffsets ? kept.rope[m] : rope_of(m); }
  __device__ __forceinline__ uint32_t srow_at() const { return kKeepOffsets ? kept.srow : srow_of(); }

  // The tile at raw -> dst. Codes, tables and stores as described above; a warp holding a
  // poisoned token (a scale byte 255: every code selected to 0, RoPE zeros, scale NaN) takes the
  // same code with those selects, the others none (~20 instructions a thread a tile).
  __device__ __forceinline__ void operator()(const unsigned char* raw, unsigned char* dst) const {
    // The token's scale row is plain (rows of 4-16 bytes: no swizzle), aligned to its size (the
    // section starts at 64 code rows of a 128-byte aligned tile). One vector load: a warp's 32 rows
    // are then one contiguous run, where word loads hit each bank kGroups / 4 times.
    const unsigned char* sp = raw + srow_at();
    ScaleRow<kGroups> sr;
    if constexpr (kGroups == 16) {
      const uint4 v = *reinterpret_cast<const uint4*>(sp);
      sr.w[0] = v.x, sr.w[1] = v.y, sr.w[2] = v.z, sr.w[3] = v.w;
    } else if constexpr (kGroups == 8) {
      const uint2 v = *reinterpret_cast<const uint2*>(sp);
      sr.w[0] = v.x, sr.w[1] = v.y;
    } else {
      sr.w[0] = *reinterpret_cast<const uint32_t*>(sp);
    }
    const uint32_t bmax = sr.max_byte();
    const bool poison = bmax == quant::kFp4PoisonScale;
    const int e = max(static_cast<int>(bmax) - 127, quant::kFp4ToFp8MinExponent);
    if (__any_sync(0xffffffffu, poison))
      convert<true>(raw, dst, sp, e, poison);
    else
      convert<false>(raw, dst, sp, e, false);
  }

 private:
  template <bool kPoison>
  __device__ __forceinline__ void convert(const unsigned char* raw, unsigned char* dst, const unsigned char* sp, int e,
                                          bool poison) const {
    // Every group of the share in flight at once where a share has at most three (the narrow
    // kernel's six shares); two at a time otherwise (the 64-row kernel's P.V warps hold 128
    // accumulators beside the conversion). A chunk of groups is one basic block: all its loads
    // first, the tables, then the conversions and stores (with a branch a group for the rare cases
    // the route ran 2-4% slower, docs/gpu-notes.md session 22): a poisoned token's codes are
    // selected to 0 (every table maps code 0 to byte 0), a share's missing last group is loaded
    // from a valid row and neither converted nor stored, and the tables of groups more than 11
    // octaves below the token's largest (k < -5: rounded products) are redone in one branch a
    // chunk, taken only by a thread that has one; it reads their scale bytes again rather than
    // keep the exponents live.
    constexpr int kChunk = kTrips <= 3 ? kTrips : 2;
    const unsigned char* sh = sp + h;  // group h + k kShares's scale byte at sh + k kShares
#pragma unroll
    for (int k0 = 0; k0 < kTrips; k0 += kChunk) {
      auto table_exp = [&](int k) { return static_cast<int>(sh[k * kShares]) - 127 - e + 6; };
      uint4 codes[kChunk];
      uint32_t t0[kChunk], t1[kChunk];
      bool rare = false;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int k = k0 + j;
        codes[j] = *reinterpret_cast<const uint4*>(raw + code_at(k));
        const int kx = table_exp(k);
        e2m1_e4m3_tables_exact(kx, t0[j], t1[j]);
        rare |= kx < -5 && has_group(k);
        if (kPoison && poison) codes[j] = make_uint4(0u, 0u, 0u, 0u);
      }
      if (rare)
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          const int kx = table_exp(k0 + j);
          if (kx < -5) e2m1_e4m3_tables(kx, t0[j], t1[j]);
        }
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int k = k0 + j;
        if (!has_group(k)) continue;
        const uint2 a = e2m1x8_to_e4m3(codes[j].x, t0[j], t1[j]), b = e2m1x8_to_e4m3(codes[j].y, t0[j], t1[j]);
        const uint2 cc = e2m1x8_to_e4m3(codes[j].z, t0[j], t1[j]), d = e2m1x8_to_e4m3(codes[j].w, t0[j], t1[j]);
        *reinterpret_cast<uint4*>(dst + lat_at(k)) = make_uint4(a.x, a.y, b.x, b.y);
        *reinterpret_cast<uint4*>(dst + (lat_at(k) ^ 16u)) = make_uint4(cc.x, cc.y, d.x, d.y);
      }
    }
    // RoPE: the same 16-byte chunk positions in both layouts (same row width, same swizzle).
    const float up = __int_as_float((127 + 6 - e) << 23);  // 2^(6 - e), 6 - e in [-121, 46]
#pragma unroll
    for (int m = 0; m < kRopeTrips; ++m) {
      if (!has_rope(m)) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(raw + kRawRope + rope_at(m));
      uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float lo = __uint_as_float(w[i] << 16) * up, hi = __uint_as_float(w[i] & 0xFFFF0000u) * up;
        w[i] = kPoison && poison ? 0u : detail::pack_bf16(lo, hi);
      }
      *reinterpret_cast<uint4*>(dst + kDstRope + rope_at(m)) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    if (h == 0)
      *reinterpret_cast<float*>(dst + kDstScale + 4 * static_cast<uint32_t>(T)) =
          kPoison && poison ? __uint_as_float(quant::kFp8PoisonScaleBits)
                            : __int_as_float((127 + e - 6) << 23);  // e - 6 >= -46
  }
};

// The FP4 tiles' raw copies for the narrow and 64-row kernels (one thread): walks the part's
// tiles and keeps R of them in flight in the raw ring (raw_full[r] = rbar + 8 r with the copies'
// bytes, raw_empty[r] = rbar + 8 (R + r), rValid[r] the tile's valid token count).
template <int DC, int DR, int R>
struct Fp4RawProducer {
  const quant::Fp8DecodeParams& p;
  const int32_t* in;
  uint32_t sRaw, rbar, rValid;
  int pb, pt, issued = 0;

  __device__ Fp4RawProducer(const quant::Fp8DecodeParams& p_, const int32_t* in_, uint32_t sRaw_, uint32_t rbar_,
                            uint32_t rValid_)
      : p(p_), in(in_), sRaw(sRaw_), rbar(rbar_), rValid(rValid_), pb(in_[0]), pt(in_[1]) {}

  // Issues the copies of every tile before `upto` (tile counter of the part) not issued yet.
  __device__ void until(int upto) {
    const quant::Fp4CacheLayout lay{p.page_size, DC, DR};
    const quant::Fp4CacheLayout tile{64, DC, DR};
    const uint32_t raw_bytes = static_cast<uint32_t>(tile.page_bytes());
    constexpr int kCodeW = DC / 2 < 128 ? DC / 2 : 128;
    const int end_b = in[2], end_t = in[3];
    while (issued < upto && (pb < end_b || (pb == end_b && pt < end_t))) {
      const int L = p.seqlens[pb];
      const int stop = (pb == end_b) ? end_t : quant::decode_tiles(L, kT);
      if (pt >= stop) {
        ++pb;
        pt = 0;
        continue;
      }
      const int r = issued % R;
      const int j0 = pt * kT;
      const int slot = j0 / p.page_size;
      const int page = (j0 < L && slot < p.max_pages) ? p.page_table[static_cast<size_t>(pb) * p.max_pages + slot] : -1;
      const bool ok = page >= 0 && page < p.num_pages;
      if (!ok && j0 < L && p.error_flag != nullptr) atomicExch(p.error_flag, 1);
      detail::mbar_wait(rbar + 8 * (R + r), ((issued / R) & 1) ^ 1);
      sts32(rValid + 4 * r, ok ? static_cast<uint32_t>(min(kT, L - j0)) : 0u);
      const uint32_t full = rbar + 8 * r;
      if (!ok) {
        detail::mbar_arrive(full);
      } else {
        detail::mbar_arrive_expect_tx(full, raw_bytes);
        const uint8_t* src = p.cache + static_cast<size_t>(page) * lay.page_bytes();
        const int off = j0 % p.page_size;
        const uint32_t d = sRaw + r * raw_bytes;
        for (int kb = 0; kb < (DC / 2) / kCodeW; ++kb)
          detail::bulk_g2s(d + kb * 64 * kCodeW, src + static_cast<size_t>(kb) * p.page_size * kCodeW + off * kCodeW,
                           64 * kCodeW, full);
        detail::bulk_g2s(d + tile.scale_offset(), src + lay.scale_offset() + off * (DC / 32), 64 * (DC / 32), full);
        detail::bulk_g2s(d + tile.rope_offset(), src + lay.rope_offset() + off * 2 * DR, 64 * 2 * DR, full);
      }
      ++issued;
      ++pt;
    }
  }
};

// Tile `it` of the part (raw ring slot it % R) into FP8 stage it % S, by the kShares shares of
// 64 threads of conv (this thread: token conv.T of share conv.h): waits for the raw tile and for
// the stage to be free (empty[s] = bar0 + 8 (S + s)), converts, and each warp arrives on full[s] =
// bar0 + 8 s and on the raw slot's empty barrier (counts: 2 kShares warps). Share 0's token 0
// writes the stage's valid count.
template <int S, int R, class Conv>
__device__ __forceinline__ void convert_fp4_tile(const Conv& conv, int it, unsigned char* gSt, uint32_t stage_bytes,
                                                 uint32_t bar0, uint32_t sValid, const unsigned char* gRaw,
                                                 uint32_t rbar, uint32_t rValid) {
  constexpr uint32_t raw_bytes = quant::Fp4CacheLayout{64, Conv::kDC, Conv::kDR}.page_bytes();
  const int stage = it % S, r = it % R;
  detail::mbar_wait(rbar + 8 * r, (it / R) & 1);                  // raw tile landed
  detail::mbar_wait(bar0 + 8 * (S + stage), ((it / S) & 1) ^ 1);  // FP8 stage free
  const uint32_t valid = lds32(rValid + 4 * r);
  if (valid > 0) conv(gRaw + r * raw_bytes, gSt + stage * stage_bytes);
  if (conv.T == 0 && conv.h == 0) sts32(sValid + 4 * stage, valid);
  detail::fence_proxy_async();  // the stage is read by wgmma (async proxy)
  __syncwarp();
  if ((conv.T & 31) == 0) {
    detail::mbar_arrive(bar0 + 8 * stage);    // this warp's share of the FP8 tile is written
    detail::mbar_arrive(rbar + 8 * (R + r));  // and it is done with the raw slot
  }
}

// Tiles in a part's schedule entry (in: begin_b, begin_t, end_b, end_t).
__device__ __forceinline__ int part_tiles(const quant::Fp8DecodeParams& p, const int32_t* in) {
  int n = 0;
  for (int b = in[0], t = in[1]; b < in[2] || (b == in[2] && t < in[3]); ++b, t = 0)
    n += ((b == in[2]) ? in[3] : quant::decode_tiles(p.seqlens[b], kT)) - t;
  return n;
}

}  // namespace mla::kernels::fp8
