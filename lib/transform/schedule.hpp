#pragma once
// Scheduling rules of mla-convert's workers (convert.cpp), kept here so that they can be
// tested on their own.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/fp8_block.hpp"
#include "core/phase_clock.hpp"

namespace mla::transform {

// Hands out units in order, each when the output bytes of the units started so far that the
// streaming SHA-256 has not yet consumed, plus the unit's own, stay within `limit`. What lands
// ahead of a file's hashed prefix is then always small enough to be held in memory for the
// hash (io::HoldBudget of the same size) instead of being written and read back from the
// disk, and the encoded bytes in flight are bounded by `limit` whatever the thread count.
// A unit is always let through when no unit is running (only running units can move the
// hash on, so waiting then could never end), and the queue is first come, first served: a
// big unit is not overtaken by small ones. A limit of UINT64_MAX turns the gate off.
class OutputGate {
 public:
  OutputGate(std::vector<uint64_t> unit_bytes, uint64_t limit) : bytes_(std::move(unit_bytes)), limit_(limit) {}

  // The next unit's index, or nullopt when none are left or stop() was called. Time spent
  // waiting is added to `wait` (thread-s).
  std::optional<size_t> next(PhaseTotals* wait = nullptr) {
    std::unique_lock lock(mu_);
    auto ready = [&] {
      return stopped_ || next_ >= bytes_.size() || running_ == 0 || limit_ == kOff ||
             pending_ + bytes_[next_] <= limit_;
    };
    if (!ready()) {
      ScopedPhase timed(wait);
      cv_.wait(lock, ready);
    }
    if (stopped_ || next_ >= bytes_.size()) return std::nullopt;
    const size_t i = next_++;
    pending_ += bytes_[i];
    peak_ = std::max(peak_, pending_);
    ++running_;
    return i;
  }
  // The unit has written all its bytes (or failed).
  void done() {
    {
      std::lock_guard lock(mu_);
      --running_;
    }
    cv_.notify_all();
  }
  // The hash has consumed `n` bytes of what the units wrote.
  void hashed(uint64_t n) {
    {
      std::lock_guard lock(mu_);
      pending_ -= std::min(pending_, n);
    }
    cv_.notify_all();
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }
  // Most bytes started and not yet hashed at once (a unit let through alone may pass limit).
  uint64_t peak() const {
    std::lock_guard lock(mu_);
    return peak_;
  }
  static constexpr uint64_t kOff = std::numeric_limits<uint64_t>::max();

 private:
  std::vector<uint64_t> bytes_;
  uint64_t limit_;
  size_t next_ = 0;
  uint64_t pending_ = 0, peak_ = 0;
  int running_ = 0;
  bool stopped_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
};

// Output bytes per unit (mla-convert): slices above this are split into row chunks.
inline constexpr uint64_t kUnitBytes = 64ull << 20;
// Rows per unit for a slice of `rows` rows whose output row is `row_bytes` bytes, written to
// `copies` ranks: the whole slice when it is at most `unit_bytes` in all, else a multiple of
// 128 rows (so FP8 output blocks are the same as for the whole slice) of about `unit_bytes`.
inline int64_t unit_rows(int64_t rows, uint64_t row_bytes, int copies, uint64_t unit_bytes = kUnitBytes) {
  constexpr int64_t kBlock = kFp8BlockSize;
  const uint64_t per_row = row_bytes * static_cast<uint64_t>(std::max(1, copies));
  if (per_row == 0 || static_cast<uint64_t>(rows) * per_row <= unit_bytes) return rows;
  const int64_t r = static_cast<int64_t>(unit_bytes / per_row) / kBlock * kBlock;
  return std::max<int64_t>(kBlock, r);
}

// One contiguous range of output bytes a unit writes: file `file` (any id), data offset `at`.
struct OutputPiece {
  int file = 0;
  uint64_t at = 0, n = 0;
};

// The most bytes that would sit landed but not hashed (ahead of a gap in their file) if the
// units ran one at a time in the given order. OutputGate only helps where this is small: a
// layout whose head is written by the last units (FP8 output: every scale_inv is an F32
// tensor at the head of the file, the FP8 weights at its end) keeps the prefix still until
// the end whatever the order, and the gate would only serialise the run.
inline uint64_t in_order_lag(const std::vector<std::vector<OutputPiece>>& units) {
  std::map<int, std::map<uint64_t, uint64_t>> landed;  // file -> at -> n, ahead of the prefix
  std::map<int, uint64_t> prefix;
  uint64_t ahead = 0, worst = 0;
  for (const auto& pieces : units) {
    for (const OutputPiece& p : pieces) {
      if (p.n == 0) continue;
      landed[p.file][p.at] = p.n;
      ahead += p.n;
    }
    for (auto& [file, m] : landed) {
      uint64_t& pos = prefix[file];
      for (auto it = m.begin(); it != m.end() && it->first == pos; it = m.erase(it)) {
        pos += it->second;
        ahead -= it->second;
      }
    }
    worst = std::max(worst, ahead);
  }
  return worst;
}

}  // namespace mla::transform
