// Device queries (device_info.h) and the CUDA build's implementation of include/gpu_accel/device.h.
//
// "No device" is an answer, not an error: cudaGetDeviceCount fails with cudaErrorNoDevice or
// cudaErrorInsufficientDriver on a machine without a GPU (CI), and the tests must skip there, so
// device_count() reports 0 with the runtime's reason instead of throwing.
#include "backends/cuda/device_info.h"

#include <cstdio>

#include "backends/cuda/cuda_check.h"
#include "gpu_accel/error.h"

namespace ga::cuda {

int device_count(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (reason != nullptr) *reason = str(cudaGetErrorName(status), ": ", cudaGetErrorString(status));
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "the runtime lists no device";
  return count;
}

CudaDeviceInfo device_info(int index) {
  const int count = device_count();
  GA_CHECK(index >= 0 && index < count, InvalidArgument, "CUDA device ", index, " does not exist (", count,
           " devices)");
  cudaDeviceProp prop{};
  GA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  CudaDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.l2_bytes = static_cast<uint64_t>(prop.l2CacheSize);
  int bus_bits = 0;
  if (cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index) == cudaSuccess) {
    info.memory_bus_bits = bus_bits;
  }
  (void)cudaGetLastError();
  DeviceGuard guard(index);
  size_t free_bytes = 0, total_bytes = 0;
  GA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.free_memory = free_bytes;
  return info;
}

DeviceGuard::DeviceGuard(int device) {
  GA_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) GA_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) (void)cudaSetDevice(previous_);
  (void)cudaGetLastError();  // a destructor reports nothing; the next checked call would
}

}  // namespace ga::cuda

namespace ga {

int cuda_device_count() { return cuda::device_count(); }

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  const int count = cuda::device_count();
  for (int i = 0; i < count; ++i) out.push_back(cuda::device_info(i));
  return out;
}

std::string cuda_device_summary() {
  std::string reason;
  const int count = cuda::device_count(&reason);
  if (count == 0) return "no CUDA device (" + reason + ")";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  constexpr double kMiB = 1024.0 * 1024.0;
  std::string out;
  for (int i = 0; i < count; ++i) {
    const CudaDeviceInfo d = cuda::device_info(i);
    char line[256];
    std::snprintf(line, sizeof line, "%s%d: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f free), L2 %.1f MiB", i ? "\n" : "",
                  d.index, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count,
                  static_cast<double>(d.total_memory) / kGiB, static_cast<double>(d.free_memory) / kGiB,
                  static_cast<double>(d.l2_bytes) / kMiB);
    out += line;
  }
  return out;
}

}  // namespace ga
