// Instantiations of the mma.sync flash forward for head dim 96 (bf16, fp16; Phi-3): see flash_fwd_sm80.cuh (128-column
// shared-memory rows, 96 stepped). One file per head dim keeps each translation unit small and lets the build compile
// them in parallel.
#include "backends/cuda/kernels/flash/flash_fwd_sm80.cuh"

namespace ga::cuda::flash_sm80 {

template <>
cudaError_t launch_fwd_sm80<96>(const FwdSm80Args& args, bool bf16, int batch, cudaStream_t stream) {
  return bf16 ? launch_fwd_sm80_instance<true, 96>(args, batch, stream)
              : launch_fwd_sm80_instance<false, 96>(args, batch, stream);
}

}  // namespace ga::cuda::flash_sm80
