// NCCL communicators for ranks on their own GPUs (compiled with MLA_HAVE_NCCL; otherwise the
// factory says what is missing). NVLink multicast (NVLS) is left as the environment sets it:
// the lent machines set NCCL_NVLS_ENABLE=0 and this code never overrides it.
#include "core/error.hpp"
#include "verify/multi_device_comm.hpp"

#if MLA_HAVE_NCCL
#include <atomic>

#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda_check.hpp"

namespace mla::verify {
namespace {

void check_cuda(cudaError_t e, const char* what) { cuda::check(e, what); }
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device) : comm_(comm), rank_(rank), size_(size), device_(device) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device_);
    if (buffer_) cudaFree(buffer_);
    cudaStreamDestroy(stream_);
    if (!aborted_) ncclCommDestroy(comm_);
    cudaSetDevice(current);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(double* data, size_t n) override {
    if (aborted_) throw Error("communicator aborted: another rank failed");
    if (n > capacity_) {
      if (buffer_) check_cuda(cudaFree(buffer_), "cudaFree");
      buffer_ = nullptr;
      check_cuda(cudaMalloc(&buffer_, n * sizeof(double)), "cudaMalloc (all-reduce staging)");
      capacity_ = n;
    }
    check_cuda(cudaMemcpyAsync(buffer_, data, n * sizeof(double), cudaMemcpyHostToDevice, stream_), "all-reduce upload");
    check_nccl(ncclAllReduce(buffer_, buffer_, n, ncclFloat64, ncclSum, comm_, stream_), "ncclAllReduce");
    check_cuda(cudaMemcpyAsync(data, buffer_, n * sizeof(double), cudaMemcpyDeviceToHost, stream_), "all-reduce download");
    check_cuda(cudaStreamSynchronize(stream_), "all-reduce");
  }
  void abort() override {
    // ncclCommAbort makes pending collectives on this communicator return; peers' calls then
    // fail too (NCCL reports the remote abort), so no rank waits forever.
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_{};
  double* buffer_ = nullptr;
  size_t capacity_ = 0;
  std::atomic<bool> aborted_{false};
};

}  // namespace

bool nccl_available() { return true; }

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices) {
  const int n = static_cast<int>(devices.size());
  int visible = 0;
  check_cuda(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  for (int d : devices)
    if (d < 0 || d >= visible)
      throw InputError("NCCL ranks: device " + std::to_string(d) + " requested, " + std::to_string(visible) +
                       " CUDA device(s) visible");
  // The caller's current device is restored: creating the communicators must not move the
  // calling thread's later CUDA work (e.g. the one-device backend) to another GPU.
  int current = 0;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  std::vector<ncclComm_t> comms(n);
  check_nccl(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<NcclCommunicator>(comms[r], r, n, devices[r]));
  check_cuda(cudaSetDevice(current), "cudaSetDevice");
  return out;
}

}  // namespace mla::verify

#else

namespace mla::verify {
bool nccl_available() { return false; }
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>&) {
  throw Error("ranks on several GPUs need NCCL: this build has none (configure with CUDA and NCCL found, e.g. "
              "-DNCCL_ROOT=<dir with include/nccl.h and lib/libnccl.so>), or use --device cpu for the in-process "
              "stand-in");
}
}  // namespace mla::verify

#endif
