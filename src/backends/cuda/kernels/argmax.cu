// Argmax per row (greedy sampling on the GPU: only a few bytes per sequence go back to the host).
//
// One block of 1024 threads per row: a lone request's greedy token is one row of ~32k-150k logits, and its time
// is latency, not bandwidth, so the row is spread over as many threads as a block holds, read as float4 when the
// rows are 16-byte aligned (8 loads per thread for a 32000-entry row instead of 125 scalar ones). Each thread keeps
// (best value, lowest index) over its slice, then warp shuffles and one slot per warp in shared memory reduce them
// with the same rule: larger value wins, equal values keep the lower index (the first maximum, like
// std::max_element), NaN never wins because every comparison with it is false. The optional NaN flag is one
// __syncthreads_or, so a caller can tell a row whose argmax is meaningless (the host sampler rejects NaN rows).
#include <climits>
#include <cmath>
#include <cstdint>

#include "backends/cuda/kernels/ops.h"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kArgmaxThreads = 1024;

__device__ __forceinline__ void take_better(float& best, int& best_idx, float v, int idx) {
  if (v > best || (v == best && idx < best_idx)) {
    best = v;
    best_idx = idx;
  }
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const ArgmaxParams p, bool vectorized) {
  __shared__ float warp_best[kArgmaxThreads / 32];
  __shared__ int warp_idx[kArgmaxThreads / 32];
  const float* x = p.x + static_cast<int64_t>(blockIdx.x) * p.ldx;
  const int n = static_cast<int>(p.n);
  float best = -INFINITY;
  int best_idx = INT_MAX;
  bool any_nan = false;
  int scalar_from = 0;
  if (vectorized) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int n4 = n / 4;
    for (int i = threadIdx.x; i < n4; i += kArgmaxThreads) {
      const float4 v = x4[i];
      any_nan |= (v.x != v.x) | (v.y != v.y) | (v.z != v.z) | (v.w != v.w);
      take_better(best, best_idx, v.x, 4 * i);
      take_better(best, best_idx, v.y, 4 * i + 1);
      take_better(best, best_idx, v.z, 4 * i + 2);
      take_better(best, best_idx, v.w, 4 * i + 3);
    }
    scalar_from = 4 * n4;
  }
  for (int i = scalar_from + static_cast<int>(threadIdx.x); i < n; i += kArgmaxThreads) {
    const float v = x[i];
    any_nan |= v != v;
    take_better(best, best_idx, v, i);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, offset);
    const int idx = __shfl_xor_sync(0xffffffffu, best_idx, offset);
    take_better(best, best_idx, v, idx);
  }
  if ((threadIdx.x & 31) == 0) {
    warp_best[threadIdx.x >> 5] = best;
    warp_idx[threadIdx.x >> 5] = best_idx;
  }
  const bool row_nan = __syncthreads_or(any_nan ? 1 : 0) != 0;  // also the barrier before the warp slots are read
  if (threadIdx.x < 32) {
    best = warp_best[threadIdx.x];
    best_idx = warp_idx[threadIdx.x];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best, offset);
      const int idx = __shfl_xor_sync(0xffffffffu, best_idx, offset);
      take_better(best, best_idx, v, idx);
    }
    if (threadIdx.x == 0) {
      p.out[blockIdx.x] = best_idx == INT_MAX ? 0 : best_idx;  // a row of NaN only: 0
      if (p.out_max != nullptr) p.out_max[blockIdx.x] = best;
      if (p.out_nan != nullptr) p.out_nan[blockIdx.x] = row_nan ? 1 : 0;
    }
  }
}

}  // namespace
}  // namespace detail

const char* argmax_unsupported_reason(const ArgmaxParams& p) {
  if (p.x == nullptr || p.out == nullptr) return "x and out must be device pointers";
  if (p.n_rows < 0 || p.n <= 0) return "n must be positive";
  if (p.n > 0x7fffffff || p.n_rows > 0x7fffffff) return "n or n_rows above 2^31";
  if (p.n_rows > 1 && p.ldx < p.n) return "ldx < n";
  return nullptr;
}

cudaError_t argmax(const ArgmaxParams& p, cudaStream_t stream) {
  if (argmax_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_rows == 0) return cudaSuccess;
  // float4 reads need every row 16-byte aligned.
  const bool vectorized = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && (p.n_rows == 1 || p.ldx % 4 == 0);
  detail::argmax_kernel<<<static_cast<unsigned>(p.n_rows), detail::kArgmaxThreads, 0, stream>>>(p, vectorized);
  return cudaGetLastError();
}

}  // namespace ga::cuda
