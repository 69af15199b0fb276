#include "backends/cuda/nccl_transport.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backends/cuda/cuda_check.h"
#include "gpu_accel/error.h"

namespace ga::cuda {
namespace {

void nccl_check(ncclResult_t r, const char* call) {
  GA_CHECK(r == ncclSuccess, Unavailable, "NCCL: ", call, ": ", ncclGetErrorString(r),
           r == ncclSystemError || r == ncclRemoteError ? " (a peer or the network failed)" : "");
}
#define GA_NCCL_CHECK(call) nccl_check((call), #call)

// NVLink multicast must stay off on the lent machines; set before NCCL reads its environment.
void disable_nvls() { ::setenv("NCCL_NVLS_ENABLE", "0", 1); }

}  // namespace

NcclTransport::NcclTransport(ncclComm_t comm, int rank, int world, int device, std::chrono::milliseconds timeout)
    : comm_(comm), rank_(rank), world_(world), device_(device), timeout_(timeout) {
  GA_CUDA_CHECK(cudaSetDevice(device_));
  GA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

NcclTransport::~NcclTransport() {
  cudaSetDevice(device_);
  for (auto& [id, p] : pending_) cudaEventDestroy(p.done);
  if (comm_ != nullptr) {
    if (aborted_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::unique_ptr<NcclTransport> NcclTransport::from_launch(const dist::LaunchEnv& env, int device,
                                                          std::chrono::milliseconds timeout) {
  disable_nvls();
  GA_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id{};
  if (env.rank == 0) GA_NCCL_CHECK(ncclGetUniqueId(&id));
  const std::vector<uint8_t> bytes = dist::rendezvous_broadcast(
      env, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&id), sizeof id), timeout);
  GA_CHECK(bytes.size() == sizeof id, InvalidFormat, "NCCL: rank 0 handed out ", bytes.size(), " bytes, not an id of ",
           sizeof id);
  std::memcpy(&id, bytes.data(), sizeof id);
  ncclComm_t comm = nullptr;
  GA_NCCL_CHECK(ncclCommInitRank(&comm, env.world_size, id, env.rank));
  return std::unique_ptr<NcclTransport>(new NcclTransport(comm, env.rank, env.world_size, device, timeout));
}

std::vector<std::unique_ptr<NcclTransport>> NcclTransport::for_devices(const std::vector<int>& devices,
                                                                       std::chrono::milliseconds timeout) {
  GA_CHECK(!devices.empty(), InvalidArgument, "NCCL: no devices for the group");
  disable_nvls();
  std::vector<ncclComm_t> comms(devices.size());
  GA_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<std::unique_ptr<NcclTransport>> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    out.push_back(std::unique_ptr<NcclTransport>(
        new NcclTransport(comms[i], static_cast<int>(i), static_cast<int>(devices.size()), devices[i], timeout)));
  }
  return out;
}

void NcclTransport::check_usable(int peer, const char* what) const {
  GA_CHECK(!aborted_, Unavailable, "NCCL rank ", rank_, ": the communicator was aborted after an earlier failure");
  GA_CHECK(peer >= -1 && peer < world_, InvalidArgument, "NCCL rank ", rank_, ": ", what, " rank ", peer,
           " (world size ", world_, ")");
}

dist::Ticket NcclTransport::record(int peer) {
  Pending p;
  p.peer = peer;
  GA_CUDA_CHECK(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming));
  GA_CUDA_CHECK(cudaEventRecord(p.done, stream_));
  const int64_t id = next_id_++;
  pending_.emplace_back(id, p);
  return dist::Ticket{id, -1};
}

dist::Ticket NcclTransport::send(const void* data, size_t bytes, int to) {
  check_usable(to, "send to");
  GA_CUDA_CHECK(cudaSetDevice(device_));
  GA_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, to, comm_, stream_));
  return record(to);
}

dist::Ticket NcclTransport::recv(void* data, size_t bytes, int from) {
  check_usable(from, "receive from");
  GA_CUDA_CHECK(cudaSetDevice(device_));
  GA_NCCL_CHECK(ncclRecv(data, bytes, ncclUint8, from, comm_, stream_));
  return record(from);
}

dist::Ticket NcclTransport::send_recv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                                      size_t recv_bytes, int from) {
  check_usable(to, "send to");
  check_usable(from, "receive from");
  GA_CUDA_CHECK(cudaSetDevice(device_));
  GA_NCCL_CHECK(ncclGroupStart());
  const ncclResult_t s = ncclSend(send_data, send_bytes, ncclUint8, to, comm_, stream_);
  const ncclResult_t r = ncclRecv(recv_data, recv_bytes, ncclUint8, from, comm_, stream_);
  GA_NCCL_CHECK(ncclGroupEnd());
  GA_NCCL_CHECK(s);
  GA_NCCL_CHECK(r);
  return record(from);
}

void NcclTransport::fail(const Pending& p, const char* why) {
  aborted_ = true;
  ncclCommAbort(comm_);  // releases the kernels waiting on the peer
  comm_ = nullptr;
  if (p.peer >= 0) {
    GA_THROW(Unavailable, "NCCL rank ", rank_, ": the exchange with rank ", p.peer, " ", why,
             " (rank ", p.peer, " died or is stuck); the communicator was aborted");
  }
  GA_THROW(Unavailable, "NCCL rank ", rank_, ": a collective of the ", world_, "-rank group ", why,
           " (a rank died or is stuck); the communicator was aborted");
}

void NcclTransport::wait(dist::Ticket ticket) {
  const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& e) { return e.first == ticket.id; });
  if (it == pending_.end()) return;  // already waited on
  const Pending p = it->second;
  pending_.erase(it);
  GA_CUDA_CHECK(cudaSetDevice(device_));
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    const cudaError_t q = cudaEventQuery(p.done);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      cudaEventDestroy(p.done);
      GA_CUDA_CHECK(q);
    }
    ncclResult_t async = ncclSuccess;
    if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      cudaEventDestroy(p.done);
      fail(p, ncclGetErrorString(async));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      cudaEventDestroy(p.done);
      fail(p, "did not complete within the timeout");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  cudaEventDestroy(p.done);
}

void NcclTransport::all_reduce_sum(float* data, size_t n) {
  check_usable(-1, "all-reduce with");
  GA_CUDA_CHECK(cudaSetDevice(device_));
  GA_NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_));
  wait(record(-1));
}

void NcclTransport::all_gather(const float* mine, size_t n, float* all) {
  check_usable(-1, "all-gather with");
  GA_CUDA_CHECK(cudaSetDevice(device_));
  GA_NCCL_CHECK(ncclAllGather(mine, all, n, ncclFloat32, comm_, stream_));
  wait(record(-1));
}

void NcclTransport::barrier() {
  check_usable(-1, "barrier with");
  // one float through the device: NCCL has no barrier of its own
  float* one = nullptr;
  GA_CUDA_CHECK(cudaSetDevice(device_));
  GA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&one), sizeof(float), stream_));
  GA_CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(float), stream_));
  try {
    all_reduce_sum(one, 1);
  } catch (...) {
    cudaFreeAsync(one, stream_);
    throw;
  }
  GA_CUDA_CHECK(cudaFreeAsync(one, stream_));
}

}  // namespace ga::cuda
