// Row-major GEMM of the prefill through cuBLAS: y[n][rows] = x[n][k] * W[rows][k]^T.
//
// The forward pass keeps activations row-major ([n_tokens][features]) and weights as GGUF stores
// them (one row per output feature), which in cuBLAS's column-major terms is C = op(A) * B with
// A = W transposed: no copy or transpose is ever made. Inputs are f16, bf16 or f32 (both operands the
// same type), the output is f32 and the accumulation f32 (CUBLAS_COMPUTE_32F: f32 weights are not
// silently rounded to TF32, so the f32 path stays a reference). cuBLAS picks the tensor-core kernel.
//
// The handle owns a fixed workspace (set once, so cuBLAS never allocates inside a call) and is bound
// to one stream. Errors become ga::Error with the cuBLAS status name and the shapes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/allocator.h"
#include "gpu_accel/dtype.h"

namespace ga::cuda {

struct GemmParams {
  DType type = DType::F16;  // of w and x: F16, BF16 or F32
  const void* w = nullptr;  // [rows][k], ldw elements between rows
  int64_t ldw = 0;
  const void* x = nullptr;  // [n][k], ldx elements between rows
  int64_t ldx = 0;
  float* y = nullptr;       // [n][rows], ldy floats between rows
  int64_t ldy = 0;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t n = 0;
};

class Gemm {
 public:
  Gemm(CachingAllocator& allocator, cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const GemmParams& p);  // throws ga::Error on a bad type or a cuBLAS failure

 private:
  void* handle_ = nullptr;  // cublasHandle_t (kept opaque so this header needs no cuBLAS include)
  DeviceBuffer workspace_;
};

}  // namespace ga::cuda
