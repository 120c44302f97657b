// The in-process stand-in communicator: ranks are threads of one process sharing a group
// state; a sum is two barriers (all posted, all read) around each rank summing every rank's
// buffer in rank order, so every rank gets the same bits.
#include <condition_variable>
#include <mutex>

#include "core/error.hpp"
#include "verify/multi_device_comm.hpp"

namespace mla::verify {
namespace {

struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), buffers(n, nullptr), counts(n, 0) {}
  const int size;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  long generation = 0;
  bool aborted = false;
  std::vector<double*> buffers;
  std::vector<size_t> counts;

  // Waits until all ranks arrive (or the group is aborted: throws).
  void barrier() {
    std::unique_lock<std::mutex> lock(m);
    if (aborted) throw Error("communicator aborted: another rank failed");
    const long gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || aborted; });
      if (aborted) throw Error("communicator aborted: another rank failed");
    }
  }
  void abort() {
    std::lock_guard<std::mutex> lock(m);
    aborted = true;
    cv.notify_all();
  }
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> g, int rank) : group_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  void all_reduce_sum(double* data, size_t n) override {
    ThreadGroup& g = *group_;
    {
      std::lock_guard<std::mutex> lock(g.m);
      g.buffers[rank_] = data;
      g.counts[rank_] = n;
    }
    g.barrier();  // every rank has posted its buffer
    for (int r = 0; r < g.size; ++r)
      if (g.counts[r] != n) {
        g.barrier();  // keep the group in step, then fail on every rank
        throw Error("all-reduce: rank " + std::to_string(rank_) + " sums " + std::to_string(n) + " values, rank " +
                    std::to_string(r) + " " + std::to_string(g.counts[r]));
      }
    sum_.assign(n, 0.0);
    for (int r = 0; r < g.size; ++r)
      for (size_t i = 0; i < n; ++i) sum_[i] += g.buffers[r][i];
    g.barrier();  // every rank has read every buffer
    std::copy(sum_.begin(), sum_.end(), data);
  }
  void abort() override { group_->abort(); }

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::vector<double> sum_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n) {
  if (n < 1) throw InputError("communicator: number of ranks must be >= 1, got " + std::to_string(n));
  auto g = std::make_shared<ThreadGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(g, r));
  return out;
}

}  // namespace mla::verify
