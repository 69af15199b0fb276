// Benchmark access to the Hopper flash backward's schedules (kernels/flash/flash_bwd_sm90.cuh, consumer_main): one
// device run times several of them on the same tensors. Not part of flash_attention.h's API: engine code calls
// flash_backward, which runs the default schedule. Only the default is compiled unless the build has
// -DGA_FLASH_ALL_VARIANTS=ON; an uncompiled variant answers cudaErrorNotSupported.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/kernels/flash/flash_attention.h"

namespace ga::cuda {

// flash_backward_with_kernel(p, FlashBwdKernel::kHopper, ...) with schedule `variant`:
//  -1  the default: 26, schedule 19's kernel with dK and dV staged in shared memory and written by TMA stores;
//  19  the warpgroup ping-pong of flash_bwd_sm90_pingpong.cuh (also the default 26's), storing dK/dV from
//      registers; 22 its kernel in the causal work order, 23 its kernel and the dQ convert launched behind the
//      kernel before them (programmatic dependent launch), 24 both (19 and 22-24 in every build: no kernel of
//      their own);
//  16, 17, 20, 21  variants of 19, 18 its timing without the dQ reduction; 25 its steps in persistent CTAs (one
//      per SM, tiles in the causal work order); 1 FA3's order in lockstep (consumer_main), 12 = 1 with the
//      one-warp-per-row preprocess; 9 the preprocess and convert kernels alone, 10 the default (wide) preprocess
//      alone, 8 the one-warp-per-row preprocess alone (wrong gradients: timings of their share only): the variants
//      build;
//  0, 2, 3, 4, 7 (measured slower than 1 and dropped) and 6 (9 with the row-per-warp convert) only with
//      -DGA_FLASH_BWD_OLD_SCHEDULES=1.
// Same checks and workspace as flash_backward.
cudaError_t flash_backward_hopper_variant(const FlashBwdParams& p, int variant, void* workspace,
                                          size_t workspace_bytes, cudaStream_t stream);

}  // namespace ga::cuda
