// The host side every tensor-op launcher shares: the ga::Error -> Status tier, the device and pointer checks
// (a host pointer is refused before a kernel could fault on it) and the launch geometry's SM count.
#pragma once

#include <cstdint>
#include <new>

#include "gpu_accel/error.h"
#include "gpu_accel/tensor_ops.h"

namespace ga::cuda::tensor_ops {

// Runs fn, returning a thrown ga::Error (GA_CHECK, GA_CUDA_CHECK) as the Status the entry points return.
template <typename Fn>
ops::Status to_status(Fn&& fn) {
  try {
    fn();
    return ops::Status();
  } catch (const Error& e) {
    return ops::Status(e);
  } catch (const std::bad_alloc&) {
    return ops::Status(Error(ErrorKind::OutOfMemory, "tensor op: out of host memory"));
  }
}

// Unsupported with the runtime's reason when there is no usable CUDA device.
void require_cuda_device(const char* op);

// InvalidArgument unless v's data is device or managed memory (views without elements pass).
void require_device_memory(const ops::TensorView& v, const char* op, const char* name);

// The current device's multiprocessor count (cached per device).
int sm_count();

// True when p is a multiple of `bytes` (the kernels' 16-byte vector loads need it).
inline bool aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

}  // namespace ga::cuda::tensor_ops
