// Gemm (see gemm.h): one cuBLASLt handle, one workspace, algorithms cached per (shape, n bucket).
#include "backends/cuda/gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "gpu_accel/error.h"

namespace ga::cuda {
namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLAS's recommendation for Hopper
constexpr int kMaxAlignment = 256;                         // what cuBLASLt asks of its fastest kernels

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
    case DType::F8_B128: return CUDA_R_8F_E4M3;  // codes; the scales are separate (GemmParams)
    default:
      GA_THROW(Unsupported, "cuBLAS GEMM of ", dtype_name(type), " operands (supported: F16, BF16, F32, F8_B128)");
  }
}

// Bytes of one operand element: F8_B128 operands are bare E4M3 codes.
int64_t element_bytes(DType type) {
  return type == DType::F8_B128 ? 1 : static_cast<int64_t>(traits(type).type_size);
}

// The attributes of a block-scaled FP8 GEMM: both operands VEC128_32F (one float per 128 of k).
void set_fp8_scale_modes(cublasLtMatmulDesc_t desc, const GemmParams& p) {
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  check_cublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)),
               "cublasLtMatmulDescSetAttribute", &p);
  check_cublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)),
               "cublasLtMatmulDescSetAttribute", &p);
}

// The scale pointers of one call (the plan is shared by every matrix of its shape).
void set_fp8_scale_pointers(cublasLtMatmulDesc_t desc, const GemmParams& p) {
  check_cublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.w_scales,
                                              sizeof(p.w_scales)),
               "cublasLtMatmulDescSetAttribute", &p);
  check_cublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.x_scales,
                                              sizeof(p.x_scales)),
               "cublasLtMatmulDescSetAttribute", &p);
}

// The alignment every row of a matrix keeps: the lowest set bit of its start address and of its row
// stride in bytes, at most kMaxAlignment. Part of the cache key: an algorithm chosen for 256-byte
// aligned operands may not run on less aligned ones.
int row_alignment(const void* ptr, int64_t ld, int64_t elem_bytes) {
  const uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)) |
                        static_cast<uint64_t>(ld * elem_bytes) | static_cast<uint64_t>(kMaxAlignment);
  return static_cast<int>(bits & (~bits + 1));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The smallest n of the bucket whose bound is `bound` (> kGemmMinBucket).
int64_t gemm_bucket_low(int64_t bound) {
  int64_t low = bound - 1;
  while (low > 1 && gemm_bucket(low) == bound) --low;
  return low + 1;
}

}  // namespace

int64_t gemm_bucket(int64_t n) {
  if (n <= kGemmMinBucket) return kGemmMinBucket;
  int64_t octave = kGemmMinBucket;  // n in (octave, 2 octave]
  while (2 * octave < n) octave *= 2;
  const int64_t step = octave / kGemmBucketsPerOctave;
  return octave + (n - octave + step - 1) / step * step;
}

std::vector<int64_t> gemm_bucket_warm_up_tokens(int64_t min_n, int64_t max_n) {
  std::vector<int64_t> out;
  for (int64_t n = min_n; n <= max_n; n = gemm_bucket(n) + 1) out.push_back(n);
  return out;
}

// Column-major: D[rows x n] (ld ldy) = op_T(A)[rows x k] * B[k x n]; A = W seen as [k x rows] (ld ldw),
// B = x seen as [k x n] (ld ldx). n (the columns of B and D) is set on every call.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;

  ~Plan() {
    if (d != nullptr) (void)cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) (void)cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) (void)cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  }
  void set_n(int64_t n, const GemmParams* p) {
    const uint64_t cols = static_cast<uint64_t>(n);
    check_cublas(cublasLtMatrixLayoutSetAttribute(b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)),
                 "cublasLtMatrixLayoutSetAttribute", p);
    check_cublas(cublasLtMatrixLayoutSetAttribute(d, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)),
                 "cublasLtMatrixLayoutSetAttribute", p);
  }
};

Gemm::Gemm(CachingAllocator& allocator, cudaStream_t stream)
    : stream_(stream), workspace_(allocator, kGemmWorkspaceBytes) {
  const char* mode = std::getenv("GA_GEMM");
  use_gemm_ex_ = mode != nullptr && std::strcmp(mode, "gemmex") == 0;
  const char* rep = std::getenv("GA_GEMM_BUCKET_REP");
  rep_lower_ = rep != nullptr && std::strcmp(rep, "lower") == 0;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess) {
    fp8_block_scaling_ = major == 9 && minor == 0;
  }
  if (use_gemm_ex_) {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    handle_ = h;
    check_cublas(cublasSetStream(h, stream), "cublasSetStream");
    check_cublas(cublasSetWorkspace(h, workspace_.data(), workspace_.size()), "cublasSetWorkspace");
    check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  } else {
    cublasLtHandle_t lt = nullptr;
    check_cublas(cublasLtCreate(&lt), "cublasLtCreate");
    lt_handle_ = lt;
  }
}

Gemm::~Gemm() {
  plans_.clear();
  if (lt_handle_ != nullptr) (void)cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_handle_));
  if (handle_ != nullptr) (void)cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

Gemm::Plan& Gemm::plan_for(const GemmParams& p, int64_t bucket_n) {
  const int64_t elem = element_bytes(p.type);
  const Key key{static_cast<int>(p.type), p.rows, p.k, p.ldw, p.ldx, p.ldy, row_alignment(p.w, p.ldw, elem),
                row_alignment(p.x, p.ldx, elem), row_alignment(p.y, p.ldy, 4), bucket_n};
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;

  const auto t0 = std::chrono::steady_clock::now();
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t t = cuda_type(p.type);
  check_cublas(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", &p);
  const cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
               "cublasLtMatmulDescSetAttribute", &p);
  check_cublas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
               "cublasLtMatmulDescSetAttribute", &p);
  if (p.type == DType::F8_B128) {
    set_fp8_scale_modes(plan->desc, p);
    set_fp8_scale_pointers(plan->desc, p);  // the heuristic sees a complete descriptor
  }
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  // negative: an exact n (run's fallback); else the bucket's bound, or (GA_GEMM_BUCKET_REP=lower, a
  // diagnostic) its smallest n
  int64_t heuristic_n = bucket_n < 0 ? -bucket_n : bucket_n;
  if (bucket_n > 0 && rep_lower_) {
    heuristic_n = bucket_n <= kGemmMinBucket ? kGemmFirstGemmTokens : gemm_bucket_low(bucket_n);
  }
  check_cublas(cublasLtMatrixLayoutCreate(&plan->a, t, u(p.k), u(p.rows), p.ldw), "cublasLtMatrixLayoutCreate", &p);
  check_cublas(cublasLtMatrixLayoutCreate(&plan->b, t, u(p.k), u(heuristic_n), p.ldx), "cublasLtMatrixLayoutCreate",
               &p);
  check_cublas(cublasLtMatrixLayoutCreate(&plan->d, CUDA_R_32F, u(p.rows), u(heuristic_n), p.ldy),
               "cublasLtMatrixLayoutCreate", &p);

  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", &p);
  const uint64_t max_ws = workspace_.size();
  const uint32_t align_a = static_cast<uint32_t>(std::get<6>(key)), align_b = static_cast<uint32_t>(std::get<7>(key)),
                 align_d = static_cast<uint32_t>(std::get<8>(key));
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, 4);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, 4);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, 4);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, 4);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(lt_handle_), plan->desc, plan->a, plan->b,
                                        plan->d, plan->d, pref, 1, &result, &found);
  }
  (void)cublasLtMatmulPreferenceDestroy(pref);
  ++stats_.heuristic_queries;
  stats_.heuristic_seconds += seconds_since(t0);
  check_cublas(st, "cublasLtMatmulAlgoGetHeuristic", &p);
  GA_CHECK(found > 0 && result.state == CUBLAS_STATUS_SUCCESS, Unsupported, "cuBLASLt has no algorithm for rows ",
           p.rows, ", k ", p.k, ", n ", heuristic_n, ", ", dtype_name(p.type), " (ldw ", p.ldw, ", ldx ", p.ldx,
           ", ldy ", p.ldy, ")");
  plan->algo = result.algo;
  plan->workspace_bytes = result.workspaceSize;
  Plan& out = *plan;
  plans_.emplace(key, std::move(plan));
  return out;
}

void Gemm::run(const GemmParams& p) {
  GA_CHECK(p.rows > 0 && p.k > 0 && p.n > 0 && p.ldw >= p.k && p.ldx >= p.k && p.ldy >= p.rows, InvalidArgument,
           "GEMM shapes: rows ", p.rows, ", k ", p.k, ", n ", p.n, ", ldw ", p.ldw, ", ldx ", p.ldx, ", ldy ", p.ldy);
  constexpr int64_t kMax = 0x7fffffff;
  GA_CHECK(p.rows <= kMax && p.k <= kMax && p.n <= kMax && p.ldw <= kMax && p.ldx <= kMax && p.ldy <= kMax,
           InvalidArgument, "GEMM dimension above 2^31");
  (void)cuda_type(p.type);  // a clear error for a type neither path takes
  if (p.type == DType::F8_B128) {
    GA_CHECK(supports_fp8(), Unsupported,
             "the block-scaled FP8 GEMM needs cuBLASLt on a Hopper (sm_90) GPU (not GA_GEMM=gemmex)");
    GA_CHECK(p.k % 128 == 0 && p.rows % 4 == 0 && p.n % 4 == 0 && p.ldw % 16 == 0 && p.ldx % 16 == 0 &&
                 p.w_scales != nullptr && p.x_scales != nullptr,
             InvalidArgument, "FP8 GEMM: k a multiple of 128, rows and n of 4, ldw and ldx of 16, both scale arrays set (rows ",
             p.rows, ", k ", p.k, ", n ", p.n, ", ldw ", p.ldw, ", ldx ", p.ldx, ")");
  }
  ++stats_.calls;
  if (use_gemm_ex_) {
    run_gemm_ex(p);
    return;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const auto lt = static_cast<cublasLtHandle_t>(lt_handle_);
  const auto matmul = [&](Plan& plan) {
    plan.set_n(p.n, &p);
    if (p.type == DType::F8_B128) set_fp8_scale_pointers(plan.desc, p);
    return cublasLtMatmul(lt, plan.desc, &alpha, p.w, plan.a, p.x, plan.b, &beta, p.y, plan.d, p.y, plan.d, &plan.algo,
                          workspace_.data(), workspace_.size(), stream_);
  };
  const cublasStatus_t st = matmul(plan_for(p, gemm_bucket(p.n)));
  if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) {
    check_cublas(st, "cublasLtMatmul", &p);
    return;
  }
  // The bucket's algorithm refused this n (not seen on Hopper; kept so an odd shape still runs): an
  // algorithm of its own, cached under the negative n so it never mixes with a bucket.
  check_cublas(matmul(plan_for(p, -p.n)), "cublasLtMatmul", &p);
}

void Gemm::run_gemm_ex(const GemmParams& p) {
  const cudaDataType_t t = cuda_type(p.type);
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.rows),
                            static_cast<int>(p.n), static_cast<int>(p.k), &alpha, p.w, t, static_cast<int>(p.ldw), p.x,
                            t, static_cast<int>(p.ldx), &beta, p.y, CUDA_R_32F, static_cast<int>(p.ldy),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx", &p);
}

}  // namespace ga::cuda
