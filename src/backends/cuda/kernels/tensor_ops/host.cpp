// The shared host checks of the tensor-op launchers (host.h).
#include "backends/cuda/kernels/tensor_ops/host.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"

namespace ga::cuda::tensor_ops {

namespace {

int64_t element_count(const ops::TensorView& v) {
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
  return n;
}

constexpr int kMaxCachedDevices = 64;

}  // namespace

void require_cuda_device(const char* op) {
  std::string reason;
  GA_CHECK(device_count(&reason) > 0, Unsupported, op, ": no CUDA device (", reason, ")");
}

void require_device_memory(const ops::TensorView& v, const char* op, const char* name) {
  if (element_count(v) == 0) return;
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, v.data);
  if (e != cudaSuccess) (void)cudaGetLastError();  // older runtimes fail on host pointers: not a sticky error
  GA_CHECK(e == cudaSuccess && (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
           InvalidArgument, op, ": ", name, " is not device memory (Device::Cuda takes device or managed pointers)");
}

int sm_count() {
  static std::atomic<int> cache[kMaxCachedDevices] = {};
  int device = 0;
  GA_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 0 && device < kMaxCachedDevices) {
    const int cached = cache[device].load(std::memory_order_relaxed);
    if (cached > 0) return cached;
  }
  int n = 0;
  GA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < kMaxCachedDevices) cache[device].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace ga::cuda::tensor_ops
