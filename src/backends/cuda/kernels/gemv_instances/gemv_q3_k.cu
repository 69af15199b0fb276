// GEMV kernels for Q3_K weights (one file per type: the CI compiles them in parallel; see gemv_impl.cuh).
#include "backends/cuda/kernels/gemv_impl.cuh"

namespace ga::cuda::detail {
template cudaError_t launch_gemv<DecodeQ3_K>(const GemvParams&, cudaStream_t);
}  // namespace ga::cuda::detail
