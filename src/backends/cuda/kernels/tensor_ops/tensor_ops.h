// The CUDA kernels of the tensor-ops library's bandwidth-bound ops (include/gpu_accel/tensor_ops.h): elementwise
// (an activation; add/mul with broadcasting), reductions along one axis and the fused rows (rms_norm, layer_norm,
// softmax). src/ops/*.cpp validate shapes and types once and call these for Device::Cuda.
//
// Entry points in the FlashInfer style: a params struct of device pointers with shapes and strides in elements
// (TensorView), the stream (a cudaStream_t; nullptr: the legacy default stream) last, a Status back. They never
// allocate and never synchronise. What they check themselves is what only the device can say: a CUDA device
// exists and every pointer is device (or managed) memory, so a host pointer gets InvalidArgument instead of an
// illegal-address fault that would poison the context.
//
// No CUDA header here: a build without CUDA links backends/cuda_stub/tensor_ops_none.cpp, which answers
// Unsupported, so the dispatch compiles the same in both builds.
#pragma once

#include "gpu_accel/tensor_ops.h"

namespace ga::cuda::tensor_ops {

// out = act(x); x and out of one shape (out may be x).
struct UnaryParams {
  ops::Activation act = ops::Activation::None;
  ops::TensorView x, out;
};

// out = a op b; a and b already have out's rank and shape, their broadcast dims as stride 0 (the dispatch
// expands numpy's right-aligned broadcasting before the call).
struct BinaryParams {
  ops::BinaryOp op = ops::BinaryOp::Add;
  ops::TensorView a, b, out;
};

// out = op over x's `axis`; out has x's shape without the axis (argmax: I64).
struct ReduceParams {
  ops::ReduceOp op = ops::ReduceOp::Sum;
  ops::TensorView x;
  int axis = 0;
  ops::TensorView out;
};

// A fused op along the last axis; weight and bias are 1-d [n] views (data == nullptr: none).
enum class RowOp { RmsNorm, LayerNorm, Softmax };
struct RowParams {
  RowOp op = RowOp::Softmax;
  ops::TensorView x, weight, bias, out;
  float eps = 0.0f;
};

ops::Status unary(const UnaryParams& p, void* stream);
ops::Status binary(const BinaryParams& p, void* stream);
ops::Status reduce(const ReduceParams& p, void* stream);
ops::Status row_op(const RowParams& p, void* stream);

}  // namespace ga::cuda::tensor_ops
