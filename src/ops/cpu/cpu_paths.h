// The CPU implementations of the planned ops (gemm, conv2d): how a validated description is run on the
// backend's matmul. The dispatch files (ops/gemm.cpp, ops/conv2d.cpp) check shapes and types, then call these
// for Device::Cpu; a CUDA implementation will sit beside them behind the same dispatch.
#pragma once

#include <cstddef>

#include "gpu_accel/tensor_ops.h"

namespace ga::ops::cpu_path {

// The mapping of a GEMM onto matmul, and the float32 workspace it needs.
CpuGemmPath plan_gemm(const GemmDesc& d);
size_t gemm_workspace_bytes(const GemmDesc& d, const CpuGemmPath& path);
void run_gemm(const GemmPlan& plan, const GemmArgs& args, float* workspace, ThreadPool* pool);

// The tiling of a conv2d's output pixels, and one tile's workspace per thread of the pool.
CpuConv2dPath plan_conv2d(const Conv2dPlan& plan, ThreadPool* pool);
size_t conv2d_workspace_bytes(const Conv2dPlan& plan);
void run_conv2d(const Conv2dPlan& plan, const Conv2dArgs& args, float* workspace, ThreadPool* pool);

}  // namespace ga::ops::cpu_path
