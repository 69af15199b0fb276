// The small per-row kernels of elementwise.h.
//
// All of them are a few KB per step: their cost is the launch and one dependent round trip, so they are
// written for clarity (a grid-stride loop, or one block per row or head with a shared-memory reduction),
// not for bandwidth. Reductions accumulate in float with the warp shuffles of device_bytes.cuh; the CPU
// reference accumulates the RMSNorm in double, a difference far below the engine's 1e-2 parity bar.
#include <cmath>

#include "backends/cuda/kernels/device_bytes.cuh"
#include "backends/cuda/kernels/elementwise.h"
#include "backends/cuda/kernels/pdl.cuh"
#include "backends/cuda/kernels/step_math.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// The sum over the block of v; every thread gets it.
__device__ float block_total(float v, float* warp_sums) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += warp_sums[w];
  __syncthreads();  // warp_sums may be reused by the next reduction
  return total;
}

// blockIdx.x = row, blockIdx.y = head over both segments.
__global__ void __launch_bounds__(kThreads) head_rms_norm_kernel(const HeadRmsNormParams p) {
  __shared__ float warp_sums[kThreads / 32];
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t r = blockIdx.x;
  int64_t h = blockIdx.y;
  float* x = p.x + r * p.ldx;
  const float* w = p.weight;
  if (h >= p.n_heads) {
    h -= p.n_heads;
    x = p.x2 + r * p.ldx2;
    w = p.weight2;
  }
  x += h * p.head_dim;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < p.head_dim; i += kThreads) sum_sq += x[i] * x[i];
  const float total = block_total(sum_sq, warp_sums);
  const float inv = inv_rms(total, p.head_dim, p.eps);
  for (int64_t i = threadIdx.x; i < p.head_dim; i += kThreads) x[i] = x[i] * inv * w[i];
}

template <class F>
__global__ void __launch_bounds__(kThreads) rows_kernel(float* x, int64_t ldx, int64_t n_rows, int64_t n, F f) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t total = n_rows * n;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = idx / n;
    const int64_t i = idx - r * n;
    f(x[r * ldx + i], r, i);
  }
}

template <class F>
cudaError_t launch_rows(float* x, int64_t ldx, int64_t n_rows, int64_t n, F f, cudaStream_t stream) {
  if (x == nullptr || n_rows < 0 || n < 0 || (n_rows > 1 && ldx < n)) return cudaErrorInvalidValue;
  const int64_t total = n_rows * n;
  if (total == 0) return cudaSuccess;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return launch_after_prior(rows_kernel<F>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, x, ldx,
                            n_rows, n, f);
}

struct Softcap {
  float cap, inv;
  __device__ void operator()(float& v, int64_t, int64_t) const { v = cap * tanhf(v * inv); }
};
struct Scale {
  float s;
  __device__ void operator()(float& v, int64_t, int64_t) const { v *= s; }
};
struct AddRows {
  const float* y;
  int64_t ldy;
  __device__ void operator()(float& v, int64_t r, int64_t i) const { v += y[r * ldy + i]; }
};

__global__ void __launch_bounds__(kThreads) sigmoid_gate_kernel(float* y, int64_t ldy, int64_t n_y, const float* gate,
                                                                const float* x, int64_t ldx, int64_t n_x) {
  __shared__ float warp_sums[kThreads / 32];
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t r = blockIdx.x;
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < n_x; i += kThreads) dot += gate[i] * x[r * ldx + i];
  const float total = block_total(dot, warp_sums);
  const float s = 1.0f / (1.0f + expf(-total));
  for (int64_t i = threadIdx.x; i < n_y; i += kThreads) y[r * ldy + i] *= s;
}

// blockIdx.x = row, blockIdx.y = group: mean, then variance about it, then the normalized values.
__global__ void __launch_bounds__(kThreads) group_norm_kernel(const GroupNormParams p) {
  __shared__ float warp_sums[kThreads / 32];
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const int64_t g = p.n / p.groups;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * g;
  const float* x = p.x + static_cast<int64_t>(blockIdx.x) * p.ldx + first;
  float* out = p.out + static_cast<int64_t>(blockIdx.x) * p.ld_out + first;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < g; i += kThreads) sum += x[i];
  const float mean = block_total(sum, warp_sums) / static_cast<float>(g);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < g; i += kThreads) {
    const float d = x[i] - mean;
    sq += d * d;
  }
  const float scale = 1.0f / sqrtf(block_total(sq, warp_sums) / static_cast<float>(g) + p.eps);
  for (int64_t i = threadIdx.x; i < g; i += kThreads) {
    const float y = (x[i] - mean) * scale;
    out[i] = p.weight != nullptr ? y * p.weight[first + i] + p.bias[first + i] : y;
  }
}

struct UnaryFn {
  RowUnary fn;
  __device__ void operator()(float& v, int64_t, int64_t) const {
    constexpr float kV7DecayScale = 0.606531f;  // exp(-0.5), as rwkv.cpp writes it
    switch (fn) {
      case RowUnary::kSigmoid: v = 1.0f / (1.0f + expf(-v)); break;
      case RowUnary::kTanh: v = tanhf(v); break;
      case RowUnary::kSilu: v = v / (1.0f + expf(-v)); break;
      case RowUnary::kReluSquare: v = v > 0.0f ? v * v : 0.0f; break;
      case RowUnary::kExpNegExp: v = expf(-expf(v)); break;
      case RowUnary::kV7Decay: v = expf(-kV7DecayScale / (1.0f + expf(-v))); break;
    }
  }
};
struct MulRows {
  const float* y;
  int64_t ldy;
  __device__ void operator()(float& v, int64_t r, int64_t i) const { v *= y[r * ldy + i]; }
};
struct AddVector {
  const float* b;
  __device__ void operator()(float& v, int64_t, int64_t i) const { v += b[i]; }
};
struct Lerp {
  const float* target;
  int64_t ld_target;
  const float* t;
  int64_t ld_t;
  __device__ void operator()(float& v, int64_t r, int64_t i) const {
    v = v + (target[r * ld_target + i] - v) * t[r * ld_t + i];
  }
};
// One mix's value at (r, i) from the token's x and its predecessor's prev.
__device__ __forceinline__ float mix_value(const MixParams& p, float x, float prev, int64_t r, int64_t i) {
  const float m = p.mix[i];
  if (p.complement) return x * m + (prev - prev * m);
  return (prev - x) * (p.dyn != nullptr ? p.dyn[r * p.ld_dyn + i] + m : m) + x;
}
struct Mix {  // writes out; reads x, prev, dyn
  MixParams p;
  __device__ void operator()(float& o, int64_t r, int64_t i) const {
    o = mix_value(p, p.x[r * p.ldx + i], p.prev[r * p.ld_prev + i], r, i);
  }
};
struct BiasUnary {
  const float* b;
  UnaryFn fn;
  __device__ void operator()(float& v, int64_t r, int64_t i) const {
    v += b[i];
    fn(v, r, i);
  }
};

__global__ void __launch_bounds__(kThreads) mix_many_kernel(const MixManyParams p) {
  pdl_wait_prior_grid();
  pdl_allow_dependents();
  const MixParams& first = p.mix[0];
  const int64_t total = first.n_rows * first.n;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = idx / first.n;
    const int64_t i = idx - r * first.n;
    const float x = first.x[r * first.ldx + i];
    const float prev = first.prev[r * first.ld_prev + i];
#pragma unroll
    for (int m = 0; m < kMaxMixes; ++m) {
      if (m < p.count) p.mix[m].out[r * p.mix[m].ld_out + i] = mix_value(p.mix[m], x, prev, r, i);
    }
  }
}

}  // namespace
}  // namespace detail

const char* head_rms_norm_unsupported_reason(const HeadRmsNormParams& p) {
  if (p.x == nullptr || p.weight == nullptr) return "x and weight must be device pointers";
  if (p.x2 != nullptr && p.weight2 == nullptr) return "x2 needs weight2";
  if (p.n_rows < 0 || p.n_heads <= 0 || (p.x2 != nullptr && p.n_heads2 <= 0)) return "sizes must be positive";
  if (p.head_dim <= 0 || p.head_dim > 1024) return "head_dim must be in [1, 1024]";
  if (p.n_rows > 1 && (p.ldx < p.n_heads * p.head_dim || (p.x2 != nullptr && p.ldx2 < p.n_heads2 * p.head_dim))) {
    return "a row stride is shorter than its heads";
  }
  if (p.n_rows > 0x7fffffff || p.n_heads + p.n_heads2 > 65535) return "more rows or heads than a grid holds";
  if (!(p.eps > 0.0f)) return "eps must be positive";
  return nullptr;
}

cudaError_t head_rms_norm(const HeadRmsNormParams& p, cudaStream_t stream) {
  if (head_rms_norm_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_rows == 0) return cudaSuccess;
  const int64_t heads = p.n_heads + (p.x2 != nullptr ? p.n_heads2 : 0);
  return detail::launch_after_prior(detail::head_rms_norm_kernel,
                                    dim3(static_cast<unsigned>(p.n_rows), static_cast<unsigned>(heads)),
                                    dim3(detail::kThreads), 0, stream, p);
}

cudaError_t softcap_rows(float* x, int64_t ldx, int64_t n_rows, int64_t n, float cap, cudaStream_t stream) {
  if (!(cap > 0.0f)) return cudaErrorInvalidValue;
  return detail::launch_rows(x, ldx, n_rows, n, detail::Softcap{cap, 1.0f / cap}, stream);
}

cudaError_t scale_rows(float* x, int64_t ldx, int64_t n_rows, int64_t n, float scale, cudaStream_t stream) {
  return detail::launch_rows(x, ldx, n_rows, n, detail::Scale{scale}, stream);
}

cudaError_t add_rows(float* x, int64_t ldx, const float* y, int64_t ldy, int64_t n_rows, int64_t n,
                     cudaStream_t stream) {
  if (y == nullptr || (n_rows > 1 && ldy < n)) return cudaErrorInvalidValue;
  return detail::launch_rows(x, ldx, n_rows, n, detail::AddRows{y, ldy}, stream);
}

cudaError_t sigmoid_gate_rows(float* y, int64_t ldy, int64_t n_y, const float* gate, const float* x, int64_t ldx,
                              int64_t n_x, int64_t n_rows, cudaStream_t stream) {
  if (y == nullptr || gate == nullptr || x == nullptr || n_y <= 0 || n_x <= 0 || n_rows < 0 ||
      n_rows > 0x7fffffff || (n_rows > 1 && (ldy < n_y || ldx < n_x))) {
    return cudaErrorInvalidValue;
  }
  if (n_rows == 0) return cudaSuccess;
  return detail::launch_after_prior(detail::sigmoid_gate_kernel, dim3(static_cast<unsigned>(n_rows)),
                                    dim3(detail::kThreads), 0, stream, y, ldy, n_y, gate, x, ldx, n_x);
}

const char* group_norm_unsupported_reason(const GroupNormParams& p) {
  if (p.x == nullptr || p.out == nullptr) return "x and out must be device pointers";
  if ((p.weight == nullptr) != (p.bias == nullptr)) return "weight and bias come together";
  if (p.n_rows < 0 || p.n_rows > 0x7fffffff || p.n <= 0) return "sizes must be positive";
  if (p.groups <= 0 || p.groups > 65535 || p.n % p.groups != 0) return "groups must divide n (at most 65535)";
  if (p.n_rows > 1 && (p.ldx < p.n || p.ld_out < p.n)) return "a row stride is shorter than a row";
  if (!(p.eps > 0.0f)) return "eps must be positive";
  return nullptr;
}

cudaError_t group_norm_rows(const GroupNormParams& p, cudaStream_t stream) {
  if (group_norm_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.n_rows == 0) return cudaSuccess;
  return detail::launch_after_prior(detail::group_norm_kernel,
                                    dim3(static_cast<unsigned>(p.n_rows), static_cast<unsigned>(p.groups)),
                                    dim3(detail::kThreads), 0, stream, p);
}

cudaError_t unary_rows(float* x, int64_t ldx, int64_t n_rows, int64_t n, RowUnary fn, cudaStream_t stream) {
  return detail::launch_rows(x, ldx, n_rows, n, detail::UnaryFn{fn}, stream);
}

cudaError_t mul_rows(float* x, int64_t ldx, const float* y, int64_t ldy, int64_t n_rows, int64_t n,
                     cudaStream_t stream) {
  if (y == nullptr || (n_rows > 1 && ldy < n)) return cudaErrorInvalidValue;
  return detail::launch_rows(x, ldx, n_rows, n, detail::MulRows{y, ldy}, stream);
}

cudaError_t add_vector_rows(float* x, int64_t ldx, const float* b, int64_t n_rows, int64_t n, cudaStream_t stream) {
  if (b == nullptr) return cudaErrorInvalidValue;
  return detail::launch_rows(x, ldx, n_rows, n, detail::AddVector{b}, stream);
}

cudaError_t lerp_rows(float* x, int64_t ldx, const float* target, int64_t ld_target, const float* t, int64_t ld_t,
                      int64_t n_rows, int64_t n, cudaStream_t stream) {
  if (target == nullptr || t == nullptr || (n_rows > 1 && (ld_target < n || ld_t < n))) return cudaErrorInvalidValue;
  return detail::launch_rows(x, ldx, n_rows, n, detail::Lerp{target, ld_target, t, ld_t}, stream);
}

cudaError_t mix_rows(const MixParams& p, cudaStream_t stream) {
  if (p.x == nullptr || p.prev == nullptr || p.mix == nullptr ||
      (p.n_rows > 1 && (p.ldx < p.n || p.ld_prev < p.n || (p.dyn != nullptr && p.ld_dyn < p.n)))) {
    return cudaErrorInvalidValue;
  }
  return detail::launch_rows(p.out, p.ld_out, p.n_rows, p.n, detail::Mix{p}, stream);
}

cudaError_t mix_rows_many(const MixManyParams& p, cudaStream_t stream) {
  if (p.count < 1 || p.count > kMaxMixes) return cudaErrorInvalidValue;
  const MixParams& a = p.mix[0];
  for (int m = 0; m < p.count; ++m) {
    const MixParams& b = p.mix[m];
    if (b.x != a.x || b.prev != a.prev || b.ldx != a.ldx || b.ld_prev != a.ld_prev || b.n_rows != a.n_rows ||
        b.n != a.n || b.complement != a.complement || b.mix == nullptr || b.out == nullptr ||
        (b.n_rows > 1 && (b.ld_out < b.n || (b.dyn != nullptr && b.ld_dyn < b.n)))) {
      return cudaErrorInvalidValue;
    }
  }
  if (a.x == nullptr || a.prev == nullptr || a.n_rows < 0 || a.n < 0 ||
      (a.n_rows > 1 && (a.ldx < a.n || a.ld_prev < a.n))) {
    return cudaErrorInvalidValue;
  }
  const int64_t total = a.n_rows * a.n;
  if (total == 0) return cudaSuccess;
  int64_t blocks = (total + detail::kThreads - 1) / detail::kThreads;
  if (blocks > detail::kMaxBlocks) blocks = detail::kMaxBlocks;
  return detail::launch_after_prior(detail::mix_many_kernel, dim3(static_cast<unsigned>(blocks)),
                                    dim3(detail::kThreads), 0, stream, p);
}

cudaError_t add_vector_unary_rows(float* x, int64_t ldx, const float* b, int64_t n_rows, int64_t n, RowUnary fn,
                                  cudaStream_t stream) {
  if (b == nullptr) return cudaErrorInvalidValue;
  return detail::launch_rows(x, ldx, n_rows, n, detail::BiasUnary{b, detail::UnaryFn{fn}}, stream);
}

}  // namespace ga::cuda
