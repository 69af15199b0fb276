// Row-major GEMM of the prefill through cuBLASLt: y[n][rows] = x[n][k] * W[rows][k]^T.
//
// The forward pass keeps activations row-major ([n_tokens][features]) and weights as GGUF stores
// them (one row per output feature), which in cuBLAS's column-major terms is C = op(A) * B with
// A = W transposed: no copy or transpose is ever made. Inputs are f16, bf16 or f32 (both operands the
// same type), the output is f32 and the accumulation f32 (CUBLAS_COMPUTE_32F: f32 weights are not
// silently rounded to TF32, so the f32 path stays a reference). On Hopper both operands may also be
// E4M3 codes with a float32 scale per 128 elements of k (GemmParams::type F8_B128, cuBLASLt's
// VEC128_32F block scaling): the FP8 prefill of F8_B128 weights, which cuBLASLt reads in place.
//
// Why cuBLASLt with our own algorithm cache, not cublasGemmEx: GemmEx asks the heuristic afresh for
// every new n (tokens) and gets a different kernel for many of them; with CUDA's lazy module loading
// each new kernel is loaded on its first launch, so the first prefill of every new prompt length paid
// one-time costs (2026-11-22, H200, 1B F16: 21.6 ms for a 99-token prompt that takes 1.7 ms warm;
// docs/results/2026-11-22-h200-first-prefill.md). Here the algorithm is
// chosen once per (matrix shape, strides, alignment, n bucket): n is rounded up to the next bucket bound
// (16, then kGemmBucketsPerOctave bounds per octave: 20, 24, 28, 32, 40, 48, ...), the heuristic is asked
// once for that bound, and every n of the bucket reuses its algorithm (a tile kernel for the bucket's
// largest n runs any smaller n). So a model meets a few dozen (shape, algorithm) pairs, all known in
// advance: warming up at one n per bucket (gemm_bucket_warm_up_tokens) chooses every algorithm and loads
// every kernel any prompt length will use. Why quarter octaves: with one bucket per octave the bound's
// algorithm ran the bucket's low end up to 50% slower than cuBLAS's own choice for that n (H200, 1B
// shapes: n = 257 with the algorithm for 512); the first octave (8, 16] is one bucket (flat timing).
//
// The handle owns a fixed workspace (set once, so cuBLAS never allocates inside a call, and graph
// capture works) and is bound to one stream. Errors become ga::Error with the cuBLAS status name and
// the shapes. GA_GEMM=gemmex (a diagnostic switch, read at construction) restores the cublasGemmEx
// path, for before/after measurements in one build; GA_GEMM_BUCKET_REP=lower asks the heuristic at each
// bucket's smallest n instead of its bound (for comparison).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backends/cuda/allocator.h"
#include "gpu_accel/dtype.h"

namespace ga::cuda {

struct GemmParams {
  DType type = DType::F16;  // of w and x: F16, BF16 or F32; or F8_B128 (below)
  const void* w = nullptr;  // [rows][k], ldw elements between rows
  int64_t ldw = 0;
  const void* x = nullptr;  // [n][k], ldx elements between rows
  int64_t ldx = 0;
  float* y = nullptr;       // [n][rows], ldy floats between rows
  int64_t ldy = 0;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t n = 0;
  // type F8_B128 (Gemm::supports_fp8()): w and x are E4M3 codes (one byte per element: ldw and ldx count bytes,
  // multiples of 16), each with one float32 scale per 128 elements of k, laid out as cuBLASLt's VEC128_32F
  // wants them: the outer dimension contiguous. k a multiple of 128; rows and n multiples of 4.
  const float* w_scales = nullptr;  // [k / 128][rows]: split_rows_f8_gemm_scales (weight_layout.h)
  const float* x_scales = nullptr;  // [k / 128][n]: quantize_x_fp8 (kernels/x_fp8.h)
};

// The smallest bucket's bound: the forward sends n <= 8 to the GEMV, so (8, 16] is its first bucket.
inline constexpr int64_t kGemmMinBucket = 16;
inline constexpr int64_t kGemmBucketsPerOctave = 4;  // above kGemmMinBucket
inline constexpr int64_t kGemmFirstGemmTokens = 9;    // the forward's smallest GEMM (kGemvMaxTokens + 1)

// The bucket of n: kGemmMinBucket for n <= kGemmMinBucket, else the smallest bound >= n of the
// quarter-octave grid (n in (2^b, 2^(b+1)] -> 2^b + j * 2^b / 4). Every n of a bucket runs the algorithm
// chosen for the bucket's bound.
int64_t gemm_bucket(int64_t n);

// One n per bucket that meets every GEMM algorithm prompts of min_n..max_n tokens can use: the
// smallest n of each bucket from min_n's to max_n's (min_n itself for the first). A warm-up that runs
// the GEMMs at these n loads all of their kernels at the least cost.
std::vector<int64_t> gemm_bucket_warm_up_tokens(int64_t min_n, int64_t max_n);

// Counters of the algorithm cache (for tests and the first-prefill diagnostics).
struct GemmStats {
  int64_t heuristic_queries = 0;  // cublasLtMatmulAlgoGetHeuristic calls (one per new cache entry)
  double heuristic_seconds = 0.0; // host time spent in them
  int64_t calls = 0;              // run() calls
};

class Gemm {
 public:
  Gemm(CachingAllocator& allocator, cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const GemmParams& p);  // throws ga::Error on a bad type or a cuBLAS failure
  // Whether run() takes type F8_B128: cuBLASLt's 128-block FP8 scaling (VEC128_32F) exists on Hopper (sm_90)
  // only, and not on the GemmEx path.
  bool supports_fp8() const { return !use_gemm_ex_ && fp8_block_scaling_; }
  const GemmStats& stats() const { return stats_; }
  cudaStream_t stream() const { return stream_; }  // every run() is enqueued here
  bool uses_gemm_ex() const { return use_gemm_ex_; }

 private:
  struct Plan;  // a matmul descriptor, the three layouts, the chosen algorithm (gemm.cpp)
  // (type, rows, k, ldw, ldx, ldy, alignment of w, x, y, bucket)
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int64_t>;
  Plan& plan_for(const GemmParams& p, int64_t bucket_n);
  void run_gemm_ex(const GemmParams& p);

  void* handle_ = nullptr;     // cublasHandle_t (GemmEx path); opaque so this header needs no cuBLAS include
  void* lt_handle_ = nullptr;  // cublasLtHandle_t
  cudaStream_t stream_ = nullptr;
  bool use_gemm_ex_ = false;
  bool rep_lower_ = false;  // GA_GEMM_BUCKET_REP=lower: ask the heuristic at the bucket's smallest n
  bool fp8_block_scaling_ = false;  // the stream's device is sm_90
  DeviceBuffer workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  GemmStats stats_;
};

}  // namespace ga::cuda
