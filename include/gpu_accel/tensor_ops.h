// The tensor-ops library: GEMM, conv2d, reductions, elementwise ops and fused norms, in the kernel-library
// style (cuBLASLt, FlashInfer): raw pointers, shapes and strides in elements, a Status instead of exceptions,
// and a plan/run split for the ops that choose an algorithm (gemm, conv2d): plan validates the shapes once and
// picks the path and the workspace size; run only executes. Nothing here allocates: workspace comes from the
// caller, sized by the plan.
//
// Every call names where it runs in an Exec. Device::Cpu is the reference (threaded through a ga::ThreadPool);
// Device::Cuda runs the elementwise ops, the reductions and the fused norms on the GPU (device or managed pointers,
// queued on Exec::stream, never synchronised); gemm and conv2d on Device::Cuda are refused with Unsupported for now,
// as is every Device::Cuda call in a build without CUDA.
//
// Element types: F32, F16 and BF16 (ga::DType), any mix per operand unless an op says otherwise; the math is
// float32 (reductions and norm statistics accumulate in double, as the CPU backend's rms_norm and softmax do),
// results are rounded once to the output's type. argmax writes I64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"

namespace ga {
class ThreadPool;
}

namespace ga::ops {

// Ok, or the ga::Error that stopped the call (InvalidArgument for bad shapes/types/pointers, Unsupported for
// a valid request this build does not run, e.g. a Device::Cuda gemm, or no CUDA device).
class Status {
 public:
  Status() = default;
  explicit Status(Error error) : error_(std::move(error)) {}
  bool ok() const { return !error_.has_value(); }
  const Error* error() const { return error_ ? &*error_ : nullptr; }
  // Host code that prefers exceptions: throws the carried ga::Error.
  void throw_if_error() const {
    if (error_) throw *error_;
  }

 private:
  std::optional<Error> error_;
};

enum class Device { Cpu, Cuda };

struct Exec {
  Device device = Device::Cpu;
  ThreadPool* pool = nullptr;  // Cpu: the worker threads (one call at a time per pool); nullptr: the calling thread
  void* stream = nullptr;      // Cuda: the cudaStream_t the work is queued on (nullptr: the default stream)
};

// A strided view of up to kMaxDims dimensions: element (i0, .., i{n-1}) is at
// data + sum_d i_d * strides[d] elements (strides may be 0, a broadcast, or negative). A 0-d view is a scalar.
inline constexpr int kMaxDims = 8;
struct TensorView {
  DType type = DType::F32;
  void* data = nullptr;  // const for inputs (the ops never write them)
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

// ---- activations (elementwise ops and the gemm/conv2d epilogue) ----
enum class Activation {
  None,
  Relu,      // max(x, 0)
  Gelu,      // x/2 (1 + erf(x / sqrt 2))
  GeluTanh,  // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's gelu(approximate="tanh")
  Silu,      // x sigmoid(x)
  Sigmoid,   // 1 / (1 + exp(-x))
  Tanh,
};
const char* activation_name(Activation a);

// ---- gemm / batched gemm ----
// For each batch b < batch: C_b = act(alpha * op(A_b) op(B_b) + beta * C_b + bias), row-major matrices:
// op(A) is [m][k] (A stored [m][k], or [k][m] with trans_a), op(B) is [k][n] (stored [k][n], or [n][k] with
// trans_b), C is [m][n]. ld* are the elements between rows of the stored matrix; stride_* the elements between
// batches (0: every batch reads the same matrix). beta == 0 does not read C (NaNs there are ignored, as BLAS
// does). bias is [n] (one value per column of C), added before the activation.
struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType a_type = DType::F32, b_type = DType::F32, c_type = DType::F32;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  bool has_bias = false;
  DType bias_type = DType::F32;
  Activation activation = Activation::None;
};

struct GemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;  // [n], when the plan's desc has_bias
  float alpha = 1.0f;
  float beta = 0.0f;
};

// How the CPU runs a GEMM: each batch through the backend's matmul (y[t][r] = W[r] . x[t]), whose threads split
// W's rows. rows_are_m puts C's larger side there (W = op(A), x = op(B)^T) so small-n products still use every
// thread; pack_w / pack_x say which operand is first copied to float32 rows along k.
struct CpuGemmPath {
  bool rows_are_m = false;
  bool pack_w = false, pack_x = false;
};

// What plan_gemm chose, for the plan's device (a CUDA path will add its own member beside cpu).
struct GemmPlan {
  GemmDesc desc;
  Device device = Device::Cpu;
  CpuGemmPath cpu;
  size_t workspace_bytes = 0;  // what run_gemm needs (per call; batches reuse it)
};

Status plan_gemm(const GemmDesc& desc, const Exec& exec, GemmPlan* plan);
// workspace: at least plan.workspace_bytes, float-aligned; exec must name the plan's device.
Status run_gemm(const GemmPlan& plan, const GemmArgs& args, void* workspace, const Exec& exec);

// ---- conv2d, NHWC, as an implicit GEMM ----
// x [batch][h][w][c], filter [k][r][s][c / groups] (cuDNN's KRSC), out [batch][p][q][k], all dense;
// p = (h + 2 pad_h - dil_h (r - 1) - 1) / stride_h + 1 (q likewise). Output channel o reads input channels
// of its group g = o / (k / groups). Epilogue as gemm: out = act(conv + bias[o]).
struct Conv2dDesc {
  int64_t batch = 0, h = 0, w = 0, c = 0;
  int64_t k = 0, r = 0, s = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  int64_t groups = 1;
  DType x_type = DType::F32, filter_type = DType::F32, out_type = DType::F32;
  bool has_bias = false;
  DType bias_type = DType::F32;
  Activation activation = Activation::None;
};

struct Conv2dArgs {
  const void* x = nullptr;
  const void* filter = nullptr;
  void* out = nullptr;
  const void* bias = nullptr;  // [k], when has_bias
};

// How the CPU runs a conv2d: it gathers the patches of tile_pixels output pixels (the implicit GEMM's A rows,
// never the whole im2col matrix) and multiplies them with the filter rows through the backend's matmul; tiles
// are split over the pool, so the workspace holds one tile for each of `threads` threads.
struct CpuConv2dPath {
  int64_t tile_pixels = 0;
  int threads = 1;
};

struct Conv2dPlan {
  Conv2dDesc desc;
  Device device = Device::Cpu;
  int64_t p = 0, q = 0;  // the output's height and width
  CpuConv2dPath cpu;
  size_t workspace_bytes = 0;
};

Status plan_conv2d(const Conv2dDesc& desc, const Exec& exec, Conv2dPlan* plan);
Status run_conv2d(const Conv2dPlan& plan, const Conv2dArgs& args, void* workspace, const Exec& exec);

// ---- elementwise ----
// out = act(x), x and out of one shape. out may be x itself (the same view), never a partial overlap.
Status unary(Activation op, const TensorView& x, const TensorView& out, const Exec& exec);

enum class BinaryOp { Add, Mul };
// out = a op b with numpy's broadcasting: a and b are right-aligned against out, each dim equal to out's or 1.
Status binary(BinaryOp op, const TensorView& a, const TensorView& b, const TensorView& out, const Exec& exec);

// ---- reductions along one axis ----
// out has x's shape without `axis` (argmax: I64 indices, the first maximum; a NaN wins, as in numpy).
// Sum and mean accumulate in double; max and argmax propagate NaN; logsumexp of an all -inf row is -inf.
enum class ReduceOp { Sum, Mean, Max, ArgMax, LogSumExp };
const char* reduce_name(ReduceOp op);
Status reduce(ReduceOp op, const TensorView& x, int axis, const TensorView& out, const Exec& exec);

// ---- fused norms and softmax along the last axis ----
// x and out have one shape; weight and bias (nullable views, data == nullptr for none) are 1-d over the last axis.
// rms_norm: x / sqrt(mean(x^2) + eps) * weight (weight required).
// layer_norm: (x - mean) / sqrt(var + eps) * weight + bias (biased variance, as torch.nn.LayerNorm).
// softmax: exp(x - max) / sum.
Status rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out, const Exec& exec);
Status layer_norm(const TensorView& x, const TensorView& weight, const TensorView& bias, float eps,
                  const TensorView& out, const Exec& exec);
Status softmax(const TensorView& x, const TensorView& out, const Exec& exec);

}  // namespace ga::ops
