// Probe for tests/kernels/setmaxnreg/check.sh: kernels that divide their registers between
// warpgroups with setmaxnreg at several block sizes, so ptxas reports what each launch allocates a
// thread (kernels/setmaxnreg.cuh's launch_regs must agree), and, with -DMLA_PROBE_OVERDRAW, one whose
// division asks for more than its launch allocates (the static_assert must refuse it).
#include "kernels/setmaxnreg.cuh"

namespace mla::kernels::detail {

// Warpgroup 0 takes kWg0 registers a thread, the other warpgroups kRest each.
template <int kThreads, int kWg0, int kRest>
__global__ void __launch_bounds__(kThreads, 1) setmaxnreg_probe(float* out) {
  static_assert(kWg0 + (kThreads / 128 - 1) * kRest <= setmaxnreg_budget(kThreads),
                "setmaxnreg asks for more registers than the launch allocates");
  if (threadIdx.x >= 128) {
    setmaxnreg_dec<kRest, kThreads>();
    return;
  }
  setmaxnreg_inc<kWg0, kThreads>();
  out[threadIdx.x] = static_cast<float>(threadIdx.x);
}

static_assert(launch_regs(384) == 168 && launch_regs(512) == 128 && launch_regs(640) == 96 && launch_regs(768) == 80);
template __global__ void setmaxnreg_probe<384, 232, 136>(float*);
template __global__ void setmaxnreg_probe<512, 152, 120>(float*);
template __global__ void setmaxnreg_probe<640, 152, 80>(float*);
template __global__ void setmaxnreg_probe<768, 152, 64>(float*);
#ifdef MLA_PROBE_OVERDRAW
template __global__ void setmaxnreg_probe<768, 152, 72>(float*);  // 152 + 5 x 72 = 512 > 6 x 80
#endif

}  // namespace mla::kernels::detail
