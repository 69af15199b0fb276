// Benchmark access to the Hopper flash backward's schedules (kernels/flash/flash_bwd_sm90.cuh, consumer_main): one
// device run times several of them on the same tensors. Not part of flash_attention.h's API: engine code calls
// flash_backward, which runs the default schedule. Only the default is compiled unless the build has
// -DGA_FLASH_ALL_VARIANTS=ON; an uncompiled variant answers cudaErrorNotSupported.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/kernels/flash/flash_attention.h"

namespace ga::cuda {

// flash_backward_with_kernel(p, FlashBwdKernel::kHopper, ...) with schedule `variant`: -1 the default, 0-4 and 7 the
// schedules of flash_bwd_sm90.cuh, 9 the preprocess and convert kernels alone, 8 the preprocess alone, 6 = 9 with
// the row-per-warp convert (wrong gradients: timings of their share only). Same checks and workspace as flash_backward.
cudaError_t flash_backward_hopper_variant(const FlashBwdParams& p, int variant, void* workspace,
                                          size_t workspace_bytes, cudaStream_t stream);

}  // namespace ga::cuda
