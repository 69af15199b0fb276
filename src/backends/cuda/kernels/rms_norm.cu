// RMSNorm fused with the residual add: one block per row reads x (and the residual) once, writes
// the updated residual and the normalized row; the second pass re-reads the row from L1/L2.
//
// The sum of squares is accumulated in float per thread and reduced in a tree (warp shuffles, then
// one float per warp in shared memory), which keeps the error near float rounding for rows of any
// length; the CPU reference uses double, and the parity test allows float-level differences.
#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/ops.h"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kNormThreads = 256;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const RmsNormParams p) {
  __shared__ float warp_sums[kNormThreads / 32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.ldx;
  float* res = p.residual != nullptr ? p.residual + row * p.ld_residual : nullptr;
  float* out = p.out + row * p.ld_out;

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < p.n; i += kNormThreads) {
    float v = x[i];
    if (res != nullptr) {
      v += res[i];
      res[i] = v;  // the skip connection carries the sum to the next layer
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  sum_sq = warp_sum(sum_sq);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum_sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += warp_sums[w];
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(p.n) + p.eps);

  for (int64_t i = threadIdx.x; i < p.n; i += kNormThreads) {
    // each thread re-reads only what it wrote above, so no barrier is needed before this pass
    const float v = res != nullptr ? res[i] : x[i];
    out[i] = v * inv_rms * p.weight[i];
  }
}

}  // namespace
}  // namespace detail

const char* rms_norm_unsupported_reason(const RmsNormParams& p) {
  if (p.x == nullptr || p.weight == nullptr || p.out == nullptr) return "x, weight and out must be device pointers";
  if (p.n_rows < 0 || p.n <= 0) return "n must be positive";
  if (p.n_rows > 0x7fffffff) return "more than 2^31 rows";
  if (p.ldx < p.n || p.ld_out < p.n || (p.residual != nullptr && p.ld_residual < p.n)) return "a row stride < n";
  return nullptr;
}

cudaError_t rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (rms_norm_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_rows == 0) return cudaSuccess;
  detail::rms_norm_kernel<<<static_cast<unsigned>(p.n_rows), detail::kNormThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace ga::cuda
