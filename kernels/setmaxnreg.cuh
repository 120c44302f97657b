#pragma once
// setmaxnreg (sm_90a) and the budget it has to respect. A warpgroup's setmaxnreg.inc takes its
// registers from its CTA's pool, which holds what the launch allocated and what other warpgroups'
// setmaxnreg.dec released, not the SM's 64K: an .inc beyond that waits forever (session 23: 768
// threads launch at 80 registers a thread, and a split asking for 65,536 hung in the first test;
// docs/gpu-notes.md, "Decode kernels, eighth session", has the same hang with two FP8 chains).
// The launch allocates a thread the SM's 65,536 registers over the block rounded up to whole
// warpgroups, in steps of 8 (what ptxas reports for a kernel with __launch_bounds__(threads, 1) that
// calls setmaxnreg: 128 at 512 threads, 96 at 640, 80 at 672 or 768). Each kernel that divides its
// registers between warpgroups states the division in a static_assert against setmaxnreg_budget.
namespace mla::kernels::detail {

__host__ __device__ constexpr int launch_regs(int threads) {
  const int r = (65536 / ((threads + 127) / 128 * 128)) & ~7;
  return r < 256 ? r : 256;
}
// The registers a thread, summed over the CTA's warpgroups, that their setmaxnreg may hold at once.
__host__ __device__ constexpr int setmaxnreg_budget(int threads) { return threads / 128 * launch_regs(threads); }

// A warpgroup's new count in a block of kThreads: an .inc must not lower the count the launch gave
// (an illegal instruction: docs/gpu-notes.md, session 12), nor a .dec raise it.
template <int kRegs, int kThreads>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  static_assert(kRegs >= launch_regs(kThreads), "setmaxnreg.inc below what the launch gives a thread");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs) : "memory");
}
template <int kRegs, int kThreads>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  static_assert(kRegs <= launch_regs(kThreads), "setmaxnreg.dec above what the launch gives a thread");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs) : "memory");
}

}  // namespace mla::kernels::detail
