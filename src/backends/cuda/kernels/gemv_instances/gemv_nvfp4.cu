// GEMV kernels for NVFP4 weights (GGUF type 40; one file per type: the CI compiles them in parallel; see
// gemv_impl.cuh).
#include "backends/cuda/kernels/gemv_impl.cuh"

namespace ga::cuda::detail {
template cudaError_t launch_gemv<DecodeNVFP4>(const GemvParams&, cudaStream_t);
}  // namespace ga::cuda::detail
