// Instantiations of the Hopper FP8 (e4m3) forward for head dim 128: the two variants default_variant picks
// (1: one tile per CTA, 4: persistent; both with intra-warpgroup overlap). See flash_fwd_launch.h.
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

template <>
cudaError_t launch_fwd_fp8<128>(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kStages = default_stages<128>();
  switch (variant) {
    case 1: return launch_fwd_instance<ElemKind::kE4m3, 128, 1, false, kStages>(args, num_sms, stream);
    case 4: return launch_fwd_instance<ElemKind::kE4m3, 128, 1, true, kStages>(args, num_sms, stream);
    default: return cudaErrorNotSupported;
  }
}

}  // namespace ga::cuda::flash_detail
