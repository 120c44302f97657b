#pragma once
// Per-phase accounting for long multi-threaded jobs (mla-convert --profile): every timed
// section adds its elapsed time, the CPU time of its thread and the bytes it handled to a
// PhaseTotals, from any thread. Summed over threads, elapsed time is thread-seconds
// (seconds / wall time: how many threads the phase kept busy on average) and bytes / CPU
// seconds is the rate of ONE core on that phase, unaffected by other load on the machine;
// elapsed minus CPU time is time spent waiting (disk, locks, or descheduled).
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace mla {

inline uint64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct PhaseTotals {
  std::atomic<uint64_t> ns{0};
  std::atomic<uint64_t> cpu_ns{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> calls{0};

  void add(uint64_t elapsed_ns, uint64_t elapsed_cpu_ns, uint64_t n_bytes) {
    ns.fetch_add(elapsed_ns, std::memory_order_relaxed);
    cpu_ns.fetch_add(elapsed_cpu_ns, std::memory_order_relaxed);
    bytes.fetch_add(n_bytes, std::memory_order_relaxed);
    calls.fetch_add(1, std::memory_order_relaxed);
  }
  double seconds() const { return static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9; }
  double cpu_seconds() const { return static_cast<double>(cpu_ns.load(std::memory_order_relaxed)) * 1e-9; }
};

// Times its scope into `totals` (nothing when null). `bytes` may be set before the end.
class ScopedPhase {
 public:
  explicit ScopedPhase(PhaseTotals* totals, uint64_t bytes = 0)
      : totals_(totals),
        bytes_(bytes),
        start_(totals ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}),
        start_cpu_(totals ? thread_cpu_ns() : 0) {}
  ~ScopedPhase() {
    if (!totals_) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
    totals_->add(static_cast<uint64_t>(ns), thread_cpu_ns() - start_cpu_, bytes_);
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;
  void set_bytes(uint64_t b) { bytes_ = b; }

 private:
  PhaseTotals* totals_;
  uint64_t bytes_;
  std::chrono::steady_clock::time_point start_;
  uint64_t start_cpu_;
};

}  // namespace mla
