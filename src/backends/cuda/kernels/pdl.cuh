// Programmatic dependent launch (PDL, sm_90+): lets a kernel's CTAs start while the kernel before it
// in the stream is still finishing, so that launch latency and whatever the new kernel can do without
// the previous one's results (a GEMV's first weight loads) overlap the previous kernel's tail.
//
// Why: a decode step is ~9 short kernels per layer in one CUDA graph; every boundary costs the
// previous grid's drain plus the next grid's launch and first memory round trip, which is why a
// 4096-row GEMV sits at an 8.5-11 us floor whatever its bytes
// (H200 runs of 2026-11-22; their logs are in git history under docs/results/). With the launch attribute
// cudaLaunchAttributeProgrammaticStreamSerialization the next kernel may be scheduled as soon as every
// CTA of the previous one has called pdl_allow_dependents() (or exited); captured into a graph this
// becomes a programmatic edge.
//
// Contract of every kernel launched through launch_after_prior(): it calls pdl_wait_prior_grid()
// before it reads anything an earlier kernel wrote and before it writes anything (that call returns
// once all earlier grids have completed and their memory is visible; it returns at once when the
// launch had no programmatic dependency). Reads of immutable data (weights) may come before it.
// pdl_allow_dependents() only lets the next kernel be scheduled early; it never makes this kernel's
// results visible sooner, so calling it at a kernel's start is safe. Both compile to nothing below
// sm_90, where the host also launches without the attribute.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace ga::cuda::detail {

__device__ __forceinline__ void pdl_wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether the current device can overlap launches (compute capability 9.0 or newer).
inline bool pdl_supported_on_current_device() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  return major >= 9;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-serialization attribute where
// the device supports it (the kernel must follow the contract above); returns the launch status.
template <class... KernelArgs, class... Args>
cudaError_t launch_after_prior(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                               Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl_supported_on_current_device() ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  return status != cudaSuccess ? status : cudaGetLastError();
}

}  // namespace ga::cuda::detail
