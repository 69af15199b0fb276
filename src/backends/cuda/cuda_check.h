// Turning CUDA status codes into ga::Error (the host tier of DESIGN.md's two-tier errors).
//
// Kernel launchers return cudaError_t like the runtime does; host code wraps every runtime call and
// every launcher in GA_CUDA_CHECK, which throws a ga::Error naming the call, the source location,
// the current device and the runtime's own error name and text. Out-of-memory becomes
// ErrorKind::OutOfMemory so callers can react (shrink a batch, report 503) instead of dying.
#pragma once

#include <cuda_runtime_api.h>

namespace ga::cuda {

// Throws ga::Error for anything but cudaSuccess. `call` is the source text of the failed call.
// Clears the runtime's last (non-sticky) error so the next, unrelated check does not see it again.
void check(cudaError_t status, const char* call, const char* file, int line);

// The ErrorKind a CUDA status maps to (exposed for tests).
int error_kind_of(cudaError_t status);

}  // namespace ga::cuda

// GA_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
#define GA_CUDA_CHECK(call) ::ga::cuda::check((call), #call, __FILE__, __LINE__)

// After a raw <<<>>> launch in host code: checks the launch configuration error.
#define GA_CUDA_CHECK_LAUNCH() ::ga::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
