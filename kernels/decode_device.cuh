#pragma once
// PTX wrappers shared by the decode kernels (sm_90 / sm_90a): shared-memory addresses,
// cp.async, ldmatrix, mma.sync, mbarriers, bulk and tensor (TMA) copies, named barriers,
// programmatic dependent launch, wgmma shared-memory descriptors.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

namespace mla::kernels::detail {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;


__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy; src_bytes = 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Every cp.async this thread issued, committed or not, complete (then fence_proxy_async before a
// wgmma reads them, and a barrier for the other threads).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}
// D += A (16x16 bf16, row) * B (16x8 bf16, col), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- mbarrier + bulk copy (sm_90): the producer/consumer rings ----
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Copies `bytes` (multiple of 16, both addresses 16-byte aligned) global -> shared; completes
// as transaction bytes on `bar`.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Signals a named barrier without waiting (the producer side of a bar.arrive / bar.sync pair:
// the waiting side's bar.sync with the same thread count sees every store made before this).
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// A 64 x 64 tile held as wgmma m64n64 fp32 accumulators (this thread's rows g / g + 8, columns
// 8 n + 2 tq + {0, 1}) as bf16 A fragments of the four k16 steps (the mma.sync m16n8k16 A layout
// per warp): P of a softmax tile, for O += P V with P from registers.
__device__ __forceinline__ void pack_p_fragments(const float (&sv)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const int n0 = 2 * ks, n1 = 2 * ks + 1;
    pa[ks][0] = pack_bf16(sv[n0 * 4 + 0], sv[n0 * 4 + 1]);
    pa[ks][1] = pack_bf16(sv[n0 * 4 + 2], sv[n0 * 4 + 3]);
    pa[ks][2] = pack_bf16(sv[n1 * 4 + 0], sv[n1 * 4 + 1]);
    pa[ks][3] = pack_bf16(sv[n1 * 4 + 2], sv[n1 * 4 + 3]);
  }
}

// Programmatic dependent launch: a kernel launched with the PDL attribute may start while the
// previous kernel in the stream runs; griddep_wait() blocks until that kernel has completed and
// its memory is visible (a no-op without the attribute).
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle (layout type 1).
__device__ __forceinline__ uint64_t gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = static_cast<uint64_t>((saddr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}
// The descriptor of the same layout `byte_off` bytes further on: the start-address field is the
// low 14 bits of (address >> 4) and shared memory is < 256 KB, so the add never carries out of
// it. Building each k-step's descriptor this way (one add of a constant) instead of with
// gmma_desc (mask, shift, or, then a move to uniform registers per operand) was most of the
// extra instructions ncu counted in a wgmma kernel of ours against FlashMLA's (gpu-notes.md).
__device__ __forceinline__ uint64_t gmma_desc_at(uint64_t desc, uint32_t byte_off) { return desc + (byte_off >> 4); }
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// 2^x by the SFU, subnormal results flushed to 0: exp2f adds a range fix-up (~3 instructions)
// per call; a softmax probability below 2^-126 of its row's running max adds nothing to O or l
// in fp32 (the FP8 softmaxes and the BF16 wgmma softmax use it: 0.3-3% there, docs/gpu-notes.md).
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// Whether a part (its schedule entry ending at request end_b, tile end_t, exclusive) still has
// the segment of request b starting at tile t: the split kernels' segment-loop condition.
__device__ __forceinline__ bool part_has_segment(int b, int t, int end_b, int end_t) {
  return b < end_b || (b == end_b && t < end_t);
}

}  // namespace mla::kernels::detail
