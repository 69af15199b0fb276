// Argmax per row (greedy sampling on the GPU: only 4 bytes per sequence go back to the host).
//
// One block per row; each thread scans a strided slice keeping (best value, lowest index), then
// warp shuffles and one slot per warp in shared memory reduce them with the same rule: larger value
// wins, equal values keep the lower index (the first maximum, like std::max_element), NaN never
// wins because every comparison with it is false.
#include <climits>
#include <cmath>

#include "backends/cuda/kernels/ops.h"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kArgmaxThreads = 256;

__device__ __forceinline__ void take_better(float& best, int& best_idx, float v, int idx) {
  if (v > best || (v == best && idx < best_idx)) {
    best = v;
    best_idx = idx;
  }
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const ArgmaxParams p) {
  __shared__ float warp_best[kArgmaxThreads / 32];
  __shared__ int warp_idx[kArgmaxThreads / 32];
  const float* x = p.x + static_cast<int64_t>(blockIdx.x) * p.ldx;
  float best = -INFINITY;
  int best_idx = INT_MAX;
  for (int i = threadIdx.x; i < p.n; i += kArgmaxThreads) take_better(best, best_idx, x[i], i);
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
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) take_better(best, best_idx, warp_best[w], warp_idx[w]);
    p.out[blockIdx.x] = best_idx == INT_MAX ? 0 : best_idx;  // a row of NaN: 0
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
  detail::argmax_kernel<<<static_cast<unsigned>(p.n_rows), detail::kArgmaxThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace ga::cuda
