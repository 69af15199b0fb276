// Internal seam between the host API (flash_forward.cu) and the per-head-dim instantiation files
// (flash_fwd_hd*.cu): one .cu per head dim keeps each translation unit small and lets the build
// compile them in parallel (DESIGN.md: sharded instantiations).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/flash/flash_fwd_sm90.cuh"

namespace ga::cuda::flash_detail {

// Schedules of the consumer warpgroups (flash_fwd_sm90.cuh): 0 serial, 1 intra-warpgroup overlap,
// 2 overlap + ping-pong. default_sched is what flash_forward runs: the fastest one measured on the H200
// (docs/results/2026-11-22-h200-flash.md): overlap for head dim 64, serial for 128 and 256 (where the
// overlapped schedules were 10-25% slower in the first measurement).
constexpr int default_sched(int head_dim) { return head_dim == 64 ? 1 : 0; }

// Launches the forward of head dim HD over grid (m_blocks, n_head, batch).
template <int HD>
cudaError_t launch_fwd(const FwdArgs& args, bool bf16, int sched, int n_head, int batch, cudaStream_t stream);

template <ElemKind E, int HD, int kSched>
cudaError_t launch_fwd_instance(const FwdArgs& args, int n_head, int batch, cudaStream_t stream) {
  const auto kernel = flash_fwd_sm90_kernel<E, HD, kSched>;
  constexpr size_t smem = FwdTraits<HD>::kSmemBytes;
  static const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr_status != cudaSuccess) return attr_status;
  const dim3 grid(static_cast<unsigned>(args.m_blocks), static_cast<unsigned>(n_head), static_cast<unsigned>(batch));
  kernel<<<grid, FwdTraits<HD>::kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

template <ElemKind E, int HD>
cudaError_t launch_fwd_sched(const FwdArgs& args, int sched, int n_head, int batch, cudaStream_t stream) {
  switch (sched) {
    case 0: return launch_fwd_instance<E, HD, 0>(args, n_head, batch, stream);
    case 1: return launch_fwd_instance<E, HD, 1>(args, n_head, batch, stream);
    case 2: return launch_fwd_instance<E, HD, 2>(args, n_head, batch, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ga::cuda::flash_detail
