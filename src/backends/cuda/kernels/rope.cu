// Rotary position embedding, in place, both pair layouts (Normal: adjacent, NeoX: halves).
//
// One block per token. The block size is a multiple of n_rot/2, so thread t always handles the same
// pair index i (= t mod n_rot/2) over heads t / (n_rot/2), t / (n_rot/2) + heads_per_pass, ...: its
// angle is computed once, in double (theta = pos * inv_freq reaches thousands of radians at long
// contexts, where float would lose the low digits that set the rotation), and reused for all
// its heads. The double work is a few hundred flops per thread, negligible even on GPUs with slow
// FP64.
#include <cmath>

#include "backends/cuda/kernels/ops.h"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kRopeTargetThreads = 256;

__global__ void rope_kernel(const RopeParams p) {
  const int64_t half = p.n_rot / 2;
  const int64_t pair = threadIdx.x % half;
  const int64_t heads_per_pass = blockDim.x / half;
  const int64_t token = blockIdx.x;

  double inv_freq = pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(pair) / static_cast<double>(p.n_rot));
  inv_freq *= static_cast<double>(p.freq_scale);
  if (p.freq_factors != nullptr) inv_freq /= static_cast<double>(p.freq_factors[pair]);
  double sin_d = 0.0, cos_d = 0.0;
  sincos(static_cast<double>(p.positions[token]) * inv_freq, &sin_d, &cos_d);
  const float cos_v = static_cast<float>(cos_d);
  const float sin_v = static_cast<float>(sin_d);

  const int64_t i0 = p.style == RopeStyle::Normal ? 2 * pair : pair;
  const int64_t i1 = p.style == RopeStyle::Normal ? 2 * pair + 1 : pair + half;
  for (int64_t h = threadIdx.x / half; h < p.n_heads; h += heads_per_pass) {
    float* v = p.x + token * p.token_stride + h * p.head_stride;
    const float x0 = v[i0];
    const float x1 = v[i1];
    v[i0] = x0 * cos_v - x1 * sin_v;
    v[i1] = x0 * sin_v + x1 * cos_v;
  }
}

}  // namespace
}  // namespace detail

const char* rope_unsupported_reason(const RopeParams& p) {
  if (p.x == nullptr || p.positions == nullptr) return "x and positions must be device pointers";
  if (p.n_tokens < 0 || p.n_heads <= 0 || p.head_dim <= 0) return "sizes must be positive";
  if (p.n_rot <= 0 || p.n_rot % 2 != 0 || p.n_rot > p.head_dim) return "n_rot must be even and in 2..head_dim";
  if (p.n_rot / 2 > 1024) return "n_rot above 2048";
  if (p.n_tokens > 0x7fffffff) return "more than 2^31 tokens";
  if (p.head_stride < p.head_dim || (p.n_tokens > 1 && p.token_stride < p.n_heads * p.head_stride)) {
    return "head_stride < head_dim or token_stride < n_heads * head_stride";
  }
  if (!(p.freq_base > 0.0f) || !(p.freq_scale > 0.0f)) return "freq_base and freq_scale must be positive";
  return nullptr;
}

cudaError_t rope(const RopeParams& p, cudaStream_t stream) {
  if (rope_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_tokens == 0) return cudaSuccess;
  const int half = static_cast<int>(p.n_rot / 2);
  const int per_block = half >= detail::kRopeTargetThreads ? 1 : detail::kRopeTargetThreads / half;
  detail::rope_kernel<<<static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(half * per_block), 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace ga::cuda
