#pragma once
// The collective the multi-device TPLA runner needs (SPEC section 6): an element-wise sum over
// all ranks, in place. Two implementations behind one interface:
//  - NCCL (one communicator per GPU, ncclCommInitAll), for ranks on their own GPUs;
//  - an in-process stand-in (one thread per rank, sums in rank order 0..N-1), so that machines
//    without a GPU or without libnccl (CI) run the same runner and test its bookkeeping.
// Every rank must make the same sequence of calls with the same counts (as with NCCL); a count
// mismatch is an error on every rank, not a hang.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace mla::verify {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0..n) (host memory) := sum over ranks of every rank's data[0..n).
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  // Makes every pending and later call on every rank of this group fail instead of waiting
  // (used when one rank has failed, so the others do not wait for it forever).
  virtual void abort() = 0;
};

// n in-process ranks; communicator r is for the thread that runs rank r.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n);

// Whether this build has NCCL (CMake found nccl.h and libnccl).
bool nccl_available();
// One NCCL communicator per device (rank r on devices[r]); host buffers are staged through a
// device buffer on the communicator's own stream. Rank r's calls must come from a thread whose
// current CUDA device is devices[r]. Throws mla::Error without NCCL or on an NCCL error.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices);

}  // namespace mla::verify
