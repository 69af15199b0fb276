// Instantiations of the Hopper FP8 (e4m3) forward for head dim 256: the two variants default_variant picks
// (1: one tile per CTA, 4: persistent; both with intra-warpgroup overlap). See flash_fwd_launch.h.
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

template <>
cudaError_t launch_fwd_fp8<256>(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kStages = default_stages<256>();
  switch (variant) {
    case 0: return launch_fwd_instance<ElemKind::kE4m3, 256, 0, false, kStages>(args, num_sms, stream);
    case 3: return launch_fwd_instance<ElemKind::kE4m3, 256, 0, true, kStages>(args, num_sms, stream);
    default: return cudaErrorNotSupported;
  }
}

}  // namespace ga::cuda::flash_detail
