// Instantiations of the flash backward for head dim 128 (bf16, fp16): see flash_bwd_sm80.cuh. One file per
// head dim keeps each translation unit small and lets the build compile them in parallel.
#include "backends/cuda/kernels/flash/flash_bwd_sm80.cuh"

namespace ga::cuda::flash_bwd {

template <>
cudaError_t launch_bwd<128>(const BwdArgs& args, bool bf16, cudaStream_t stream) {
  return bf16 ? launch_bwd_instance<true, 128>(args, stream) : launch_bwd_instance<false, 128>(args, stream);
}

}  // namespace ga::cuda::flash_bwd
