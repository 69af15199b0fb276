// Gemm (see gemm.h): one cuBLAS handle, one workspace, cublasGemmEx in column-major terms.
#include "backends/cuda/gemm.h"

#include <cublas_v2.h>

#include "gpu_accel/error.h"

namespace ga::cuda {
namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLAS's recommendation for Hopper

void check_cublas(cublasStatus_t status, const char* what, const GemmParams* p = nullptr) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const ErrorKind kind = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::OutOfMemory : ErrorKind::Internal;
  std::string shape;
  if (p != nullptr) shape = str(" (rows ", p->rows, ", k ", p->k, ", n ", p->n, ", ", dtype_name(p->type), ")");
  throw Error(kind, str("cuBLAS ", what, " failed: ", cublasGetStatusName(status), " - ", cublasGetStatusString(status),
                        shape));
}

cudaDataType_t cuda_type(DType type) {
  switch (type) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F32: return CUDA_R_32F;
    default: GA_THROW(Unsupported, "cuBLAS GEMM of ", dtype_name(type), " operands (supported: F16, BF16, F32)");
  }
}

}  // namespace

Gemm::Gemm(CachingAllocator& allocator, cudaStream_t stream) : workspace_(allocator, kGemmWorkspaceBytes) {
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  check_cublas(cublasSetStream(h, stream), "cublasSetStream");
  check_cublas(cublasSetWorkspace(h, workspace_.data(), workspace_.size()), "cublasSetWorkspace");
  check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

Gemm::~Gemm() {
  if (handle_ != nullptr) (void)cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void Gemm::run(const GemmParams& p) {
  GA_CHECK(p.rows > 0 && p.k > 0 && p.n > 0 && p.ldw >= p.k && p.ldx >= p.k && p.ldy >= p.rows, InvalidArgument,
           "GEMM shapes: rows ", p.rows, ", k ", p.k, ", n ", p.n, ", ldw ", p.ldw, ", ldx ", p.ldx, ", ldy ", p.ldy);
  constexpr int64_t kMax = 0x7fffffff;
  GA_CHECK(p.rows <= kMax && p.k <= kMax && p.n <= kMax && p.ldw <= kMax && p.ldx <= kMax && p.ldy <= kMax,
           InvalidArgument, "GEMM dimension above 2^31");
  const cudaDataType_t t = cuda_type(p.type);
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major: C[rows x n] (ld ldy) = op_T(A)[rows x k] * B[k x n], A = W seen as [k x rows] (ld ldw),
  // B = x seen as [k x n] (ld ldx).
  check_cublas(cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.rows),
                            static_cast<int>(p.n), static_cast<int>(p.k), &alpha, p.w, t, static_cast<int>(p.ldw), p.x,
                            t, static_cast<int>(p.ldx), &beta, p.y, CUDA_R_32F, static_cast<int>(p.ldy),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx", &p);
}

}  // namespace ga::cuda
