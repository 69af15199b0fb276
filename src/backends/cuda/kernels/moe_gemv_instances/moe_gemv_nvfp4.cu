// Grouped expert GEMV kernels for NVFP4 weights (one file per type: the CI compiles them in parallel; see
// moe_gemv_impl.cuh).
#include "backends/cuda/kernels/moe_gemv_impl.cuh"

namespace ga::cuda::detail {
template cudaError_t launch_moe_gemv<DecodeNVFP4>(const MoeGemvParams&, cudaStream_t);
}  // namespace ga::cuda::detail
