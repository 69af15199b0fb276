// Instantiations of the Hopper forward's variants 12-17 for head dim 256 (wide key tiles, lazy O rescale; bf16 and
// fp16): see flash_fwd_launch.h. A translation unit of their own so the build compiles them beside the others.
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

template <>
cudaError_t launch_fwd_tiles<256>(const FwdArgs& args, bool bf16, int variant, int num_sms, cudaStream_t stream) {
  return bf16 ? launch_fwd_tiles_of<ElemKind::kBf16, 256>(args, variant, num_sms, stream)
              : launch_fwd_tiles_of<ElemKind::kF16, 256>(args, variant, num_sms, stream);
}

}  // namespace ga::cuda::flash_detail
