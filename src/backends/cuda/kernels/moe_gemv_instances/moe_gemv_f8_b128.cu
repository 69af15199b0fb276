// Grouped expert GEMV kernels for F8_B128 weights (one file per type: the CI compiles them in parallel; see
// moe_gemv_impl.cuh).
#include "backends/cuda/kernels/moe_gemv_impl.cuh"

namespace ga::cuda::detail {
template cudaError_t launch_moe_gemv<DecodeF8B128>(const MoeGemvParams&, cudaStream_t);
}  // namespace ga::cuda::detail
