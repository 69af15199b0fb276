// Instantiations of the Hopper flash backward for head dim 128 (bf16, fp16): see flash_bwd_sm90.cuh. The only head
// dim the Hopper backward is built for; flash_backward sends the others to the mma.sync kernels (flash_bwd_hd*.cu).
#include "backends/cuda/kernels/flash/flash_bwd_sm90.cuh"

namespace ga::cuda::flash_bwd_sm90 {

template <>
cudaError_t launch<128>(const flash_bwd::BwdArgs& args, const Args& m, float* lse_log2, bool bf16,
                        cudaStream_t stream) {
  return bf16 ? launch_instance<true, 128>(args, m, lse_log2, stream)
              : launch_instance<false, 128>(args, m, lse_log2, stream);
}

}  // namespace ga::cuda::flash_bwd_sm90
