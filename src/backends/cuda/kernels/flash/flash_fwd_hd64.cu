// Instantiations of the Hopper forward for head dim 64 (bf16, fp16; every variant): see flash_fwd_launch.h.
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

template <>
cudaError_t launch_fwd<64>(const FwdArgs& args, bool bf16, int variant, int num_sms, cudaStream_t stream) {
  return bf16 ? launch_fwd_variant<ElemKind::kBf16, 64>(args, variant, num_sms, stream)
              : launch_fwd_variant<ElemKind::kF16, 64>(args, variant, num_sms, stream);
}

}  // namespace ga::cuda::flash_detail
