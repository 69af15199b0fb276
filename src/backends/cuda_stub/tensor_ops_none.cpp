// The answer of a build without CUDA to backends/cuda/kernels/tensor_ops/tensor_ops.h: the tensor ops' Device::Cuda
// calls are Unsupported, so src/ops dispatches the same way in both builds.
#include "backends/cuda/kernels/tensor_ops/tensor_ops.h"

#include "gpu_accel/error.h"

namespace ga::cuda::tensor_ops {

namespace {

ops::Status no_cuda(const char* op) {
  return ops::Status(Error(ErrorKind::Unsupported, std::string(op) + ": no CUDA in this build (configure with "
                                                                     "-DGA_CUDA=ON for Device::Cuda)"));
}

}  // namespace

ops::Status unary(const UnaryParams& p, void* /*stream*/) {
  return no_cuda(ops::activation_name(p.act));
}
ops::Status binary(const BinaryParams& p, void* /*stream*/) {
  return no_cuda(p.op == ops::BinaryOp::Add ? "add" : "mul");
}
ops::Status reduce(const ReduceParams& p, void* /*stream*/) {
  return no_cuda(ops::reduce_name(p.op));
}
ops::Status row_op(const RowParams& p, void* /*stream*/) {
  return no_cuda(p.op == RowOp::RmsNorm ? "rms_norm" : p.op == RowOp::LayerNorm ? "layer_norm" : "softmax");
}

}  // namespace ga::cuda::tensor_ops
