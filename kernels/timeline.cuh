#pragma once
// A diagnostic, compiled in only with -DMLA_TIMELINE (CMake: -DMLA_TIMELINE=ON): lane 0 of every
// warp of one CTA (grid block (0, 0)) records the SM clock at named points of its kernel, so a
// tile's time can be split between the hand-offs of its warpgroups (docs/gpu-notes.md, session
// 17). Each event is one 8-byte store, (clock64 << 8) | id, into a ring of kEvents slots a warp.
// An event placed right after a bar.sync records when the warp reached the barrier (the clock read
// issues before the barrier's wait resolves; session 19). Without MLA_TIMELINE the macros are empty
// and nothing is compiled in. Host side:
// kernels/decode_launch.hpp (v6_timeline, fp8::rows64_timeline); tools/mla-bench/timeline.py reads
// and summarises the events.
#include <cstdint>
#ifdef MLA_TIMELINE
#include <string>

#include "kernels/cuda_check.hpp"
#endif

namespace mla::kernels::timeline {

// Slots per warp, a ring: a warp's last kEvents events are kept (the end of a long run; session 18
// found the first kEvents of CTA (0, 0) identical at 8K and 32K for the v6 of its day), or with
// -DMLA_TIMELINE_FIRST (CMake MLA_TIMELINE_FIRST=ON) its first kEvents (session 27 measured v6's first
// tiles 10% slower than its last). The events slow the CTA that records them (v6's CTA (0, 0): 14-15%
// more cycles than any other CTA, session 27): whole-kernel cycles come from the spans (record_span).
constexpr int kWarps = 16, kEvents = 1024;

#ifdef MLA_TIMELINE
// Host side, a kernel file's reader: host == nullptr clears the kWarps x kEvents words of that
// file's event buffer `symbol`, else copies them to host; waits for the stream either way. A
// template, so that the symbol's address is taken in the file that defines it (no -rdc).
template <class Symbol>
void transfer(const Symbol& symbol, uint64_t* host, cudaStream_t stream, const std::string& what) {
  void* dev = nullptr;
  cuda::check(cudaGetSymbolAddress(&dev, symbol), what + " address", "mla decode");
  const size_t bytes = sizeof(uint64_t) * kWarps * kEvents;
  if (host == nullptr) cuda::check(cudaMemsetAsync(dev, 0, bytes, stream), what + " clear", "mla decode");
  else cuda::check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream), what + " read", "mla decode");
  cuda::check(cudaStreamSynchronize(stream), what, "mla decode");
}

__device__ __forceinline__ void record(uint64_t* buf, int& n, int id) {
  // Lane 0 of the first kWarps warps (a block of more warps records only those).
  if (blockIdx.x == 0 && blockIdx.y == 0 && (threadIdx.x & 31) == 0 && (threadIdx.x >> 5) < kWarps) {
    const long long c = clock64();
#ifdef MLA_TIMELINE_FIRST
    if (n < kEvents)
#endif
      buf[(threadIdx.x >> 5) * kEvents + n] = (static_cast<uint64_t>(c) << 8) | static_cast<uint64_t>(id);
  }
#ifdef MLA_TIMELINE_FIRST
  n = n < kEvents ? n + 1 : n;  // the first kEvents events of the warp (the run's start, every CTA busy)
#else
  n = (n + 1) % kEvents;
#endif
}
// Every CTA's span: thread 0 writes (globaltimer, clock64) at its start (end = 0) or end (end = 1) into
// the slots of warp kSpanWarp (a warp the kernel does not have: v6 has 12), four words a CTA, CTA
// blockIdx.y * gridDim.x + blockIdx.x (at most kEvents / 4). tools/mla-bench/timeline.py prints them,
// so that a CTA (0, 0) timeline can be set beside the whole grid's spans (session 27).
constexpr int kSpanWarp = 12;
__device__ __forceinline__ void record_span(uint64_t* buf, int end) {
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0 && cta < kEvents / 4) {
    uint64_t gt;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
    buf[kSpanWarp * kEvents + 4 * cta + 2 * end] = gt;
    buf[kSpanWarp * kEvents + 4 * cta + 2 * end + 1] = static_cast<uint64_t>(clock64());
  }
}
#endif

}  // namespace mla::kernels::timeline

#ifdef MLA_TIMELINE
#define MLA_TL_INIT(buf) \
  uint64_t* mla_tl_buf = (buf); \
  int mla_tl_n = 0
#define MLA_TL(id) ::mla::kernels::timeline::record(mla_tl_buf, mla_tl_n, (id))
#define MLA_TL_SPAN(end) ::mla::kernels::timeline::record_span(mla_tl_buf, (end))
#else
#define MLA_TL_INIT(buf) static_assert(true)
#define MLA_TL(id) static_cast<void>(0)
#define MLA_TL_SPAN(end) static_cast<void>(0)
#endif
