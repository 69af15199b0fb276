// SwiGLU: out = silu(gate) * up, element-wise over rows with their own strides.
//
// A grid-stride loop over the flattened [n_rows][n] index; the op is a pure stream (12 bytes per
// element), so coalesced scalar loads already run at bandwidth. expf (not __expf) keeps the result
// within a few ulp of the CPU reference's std::exp.
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/kernels/pdl.cuh"

namespace ga::cuda {
namespace detail {
namespace {

constexpr int kSwigluThreads = 256;
constexpr int64_t kSwigluMaxBlocks = 65535;

__global__ void __launch_bounds__(kSwigluThreads) swiglu_kernel(const SwigluParams p) {
  pdl_wait_prior_grid();  // launched after the previous kernel (pdl.cuh): its outputs are ready from here
  pdl_allow_dependents();  // after the wait: triggering first measured slower (session 3, run 2)
  const int64_t total = p.n_rows * p.n;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kSwigluThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kSwigluThreads) {
    const int64_t r = idx / p.n;
    const int64_t i = idx - r * p.n;
    const float g = p.gate[r * p.ld_gate + i];
    const float u = p.up[r * p.ld_up + i];
    p.out[r * p.ld_out + i] = g / (1.0f + expf(-g)) * u;
  }
}

}  // namespace
}  // namespace detail

const char* swiglu_unsupported_reason(const SwigluParams& p) {
  if (p.gate == nullptr || p.up == nullptr || p.out == nullptr) return "gate, up and out must be device pointers";
  if (p.n_rows < 0 || p.n <= 0) return "n must be positive";
  if (p.ld_gate < p.n || p.ld_up < p.n || p.ld_out < p.n) return "a row stride < n";
  return nullptr;
}

cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream) {
  if (swiglu_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  const int64_t total = p.n_rows * p.n;
  if (total == 0) return cudaSuccess;
  int64_t blocks = (total + detail::kSwigluThreads - 1) / detail::kSwigluThreads;
  if (blocks > detail::kSwigluMaxBlocks) blocks = detail::kSwigluMaxBlocks;
  return detail::launch_after_prior(detail::swiglu_kernel, dim3(static_cast<unsigned>(blocks)),
                                    dim3(detail::kSwigluThreads), 0, stream, p);
}

}  // namespace ga::cuda
