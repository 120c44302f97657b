#pragma once
// Device helpers of the shared-prefix kernels (kernels/prefix_*.cu): cp.async, ldmatrix,
// mma.sync m16n8k16 BF16 and the XOR swizzle of their shared-memory tiles.
//
// Tiles are row-major with rows of a multiple of 128 bytes; the 16-byte chunk c of row r is
// stored at chunk c ^ (r & 7) (only the low three bits change), so the eight row addresses of
// one ldmatrix 8x8 matrix fall in eight different bank groups.
#include <cuda_bf16.h>

#include <cstdint>

namespace mla::kernels::prefix {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t swz(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}
// 16-byte global -> shared copy; zero-fills the destination when !valid (src is not read, but
// is kept a valid address).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d += a (16x16, row) * b (16x8, col); fp32 accumulators.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats rounded to bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A 64-row x NT-column tile of Y = A W^T (A rows [*, K], W rows [NT, K], bf16, K a multiple of
// 64) on 4 warps: warp w owns rows 16w..16w+15; acc[n/8][4] in the m16n8 C layout (row
// lane/4 (+8), columns 2 (lane%4) (+1)). a_row(r) / w_row(n) return the row's first element or
// nullptr (zeros); any_row is any readable row (the address given to zero-filling copies).
// Shared memory: (64 + NT) rows of 128 bytes.
template <int NT, class ARow, class WRow>
__device__ __forceinline__ void gemm_rows64(float (&acc)[NT / 8][4], char* smem, int K, ARow a_row, WRow w_row,
                                            const uint16_t* any_row) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  char* a_s = smem;
  char* w_s = smem + 64 * 128;
#pragma unroll
  for (int i = 0; i < NT / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  for (int k0 = 0; k0 < K; k0 += 64) {
    for (int idx = tid; idx < (64 + NT) * 8; idx += 128) {
      const int r = idx >> 3, c = idx & 7;
      if (r < 64) {
        const uint16_t* src = a_row(r);
        cp_async16(smem_addr(a_s) + swz(r, c, 128), src ? src + k0 + c * 8 : any_row, src != nullptr);
      } else {
        const uint16_t* src = w_row(r - 64);
        cp_async16(smem_addr(w_s) + swz(r - 64, c, 128), src ? src + k0 + c * 8 : any_row, src != nullptr);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t a[4];
      ldsm_x4(a, smem_addr(a_s) + swz(warp * 16 + (lane & 15), ks * 2 + (lane >> 4), 128));
#pragma unroll
      for (int np = 0; np < NT / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, smem_addr(w_s) + swz(np * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1), 128));
        mma16816(acc[2 * np], a, b[0], b[1]);
        mma16816(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();
  }
}

// Named barriers (id 1..15; 0 is __syncthreads): bar_sync waits until `threads` threads have
// arrived or synced on `id`; bar_arrive signals without waiting.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// D[64x64] += A[64x16] (4 regs, bf16x2, the mma.sync m16n8k16 A layout per warp) * B[16x64]
// (smem descriptor, K-major: tnspB = 0); scale-d from `accumulate` (0: D = A B). S = Q K^T with Q
// held in registers, so only K is read from shared memory.
__device__ __forceinline__ void wgmma_rs_n64_kmajor(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                    int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

}  // namespace mla::kernels::prefix
