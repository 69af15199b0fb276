// The NCCL implementation of dist::Transport: the ranks are GPUs, the buffers device memory, and every
// operation is enqueued on the transport's own communication stream (so compute on other streams overlaps it;
// a caller orders its streams against stream() with events).
//
// Two ways to make a group: one process per GPU (the id comes from rank 0 through the TCP rendezvous of
// dist/rendezvous.h, as torchrun / mpirun / `gpu-accel launch` start them), or several GPUs of this process
// (ncclCommInitAll). NVLink multicast (NVLS) is turned off before any communicator exists: the machines here
// must not use it.
//
// Failure: wait() polls the operation's completion and the communicator's asynchronous error; when the timeout
// passes or NCCL reports an error, the communicator is aborted (ncclCommAbort: the kernels stuck on a dead peer
// are released) and wait() throws ga::Error (Unavailable) naming the peer, or the group for a collective. An
// aborted transport refuses further operations.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <vector>

#include "dist/rendezvous.h"
#include "dist/transport.h"

namespace ga::cuda {

class NcclTransport final : public dist::Transport {
 public:
  // This process's rank of a multi-process group, on `device`.
  static std::unique_ptr<NcclTransport> from_launch(const dist::LaunchEnv& env, int device,
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // One rank per device of this process, rank i on devices[i].
  static std::vector<std::unique_ptr<NcclTransport>> for_devices(
      const std::vector<int>& devices, std::chrono::milliseconds timeout = std::chrono::seconds(60));

  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // Device pointers. A lone send waits on the device for the peer's receive: exchange with send_recv.
  dist::Ticket send(const void* data, size_t bytes, int to) override;
  dist::Ticket recv(void* data, size_t bytes, int from) override;
  dist::Ticket send_recv(const void* send_data, size_t send_bytes, int to, void* recv_data, size_t recv_bytes,
                         int from) override;
  void wait(dist::Ticket ticket) override;
  // ncclAllReduce in place on the device, waited on.
  void all_reduce_sum(float* data, size_t n) override;
  // ncclAllGather on the device, waited on.
  void all_gather(const float* mine, size_t n, float* all) override;
  void barrier() override;

 private:
  NcclTransport(ncclComm_t comm, int rank, int world, int device, std::chrono::milliseconds timeout);
  struct Pending {
    cudaEvent_t done = nullptr;
    int peer = -1;  // -1: a collective
  };
  dist::Ticket record(int peer);
  void check_usable(int peer, const char* what) const;
  [[noreturn]] void fail(const Pending& p, const char* why);

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, world_ = 1, device_ = 0;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
  bool aborted_ = false;
  int64_t next_id_ = 0;
  std::vector<std::pair<int64_t, Pending>> pending_;
};

}  // namespace ga::cuda
