// GEMV kernels for F8_B128 weights (FP8 checkpoints kept in FP8; one file per type: the CI compiles them in parallel;
// see gemv_impl.cuh).
#include "backends/cuda/kernels/gemv_impl.cuh"

namespace ga::cuda::detail {
template cudaError_t launch_gemv<DecodeF8B128>(const GemvParams&, cudaStream_t);
}  // namespace ga::cuda::detail
