// Instantiations of the Hopper FP8 (e4m3) forward for head dim 128: the variants fp8_variant_compiled names
// (flash_fwd_launch.h): overlap, one tile per CTA (1); the 224-key variants (29, the default, and the candidates
// measured against it) live in flash_fwd_fp8_wide_hd128.cu; GA_FLASH_FP8_WIDE adds persistent (4); with
// -DGA_FLASH_ALL_VARIANTS=ON (or
// GA_FLASH_FP8_ALL_VARIANTS=1) also the candidates measured against them: overlap + ping-pong (2, 5), serial +
// ping-pong (7, 8) and 2/5 with a quarter of the exp2 on the FMA pipes (9, 10).
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

template <>
cudaError_t launch_fwd_fp8<128>(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kStages = default_stages<128>();
  constexpr ElemKind E = ElemKind::kE4m3;
  switch (variant) {
    case 1: return launch_fwd_instance<E, 128, 1, false, kStages>(args, num_sms, stream);
#if GA_FLASH_FP8_WIDE  // the persistent 128-key kernel (the default 29 is 8-15% faster at 4k-16k)
    case 4: return launch_fwd_instance<E, 128, 1, true, kStages>(args, num_sms, stream);
#endif
#if GA_FLASH_FP8_ALL_VARIANTS
    case 2: return launch_fwd_instance<E, 128, 2, false, kStages>(args, num_sms, stream);
    case 5: return launch_fwd_instance<E, 128, 2, true, kStages>(args, num_sms, stream);
    case 7: return launch_fwd_instance<E, 128, 3, false, kStages>(args, num_sms, stream);
    case 8: return launch_fwd_instance<E, 128, 3, true, kStages>(args, num_sms, stream);
    case 9: return launch_fwd_instance<E, 128, 2 | kSchedPolyExp, false, kStages>(args, num_sms, stream);
    case 10: return launch_fwd_instance<E, 128, 2 | kSchedPolyExp, true, kStages>(args, num_sms, stream);
#endif
    case kFp8WideVariant: case kFp8TreeVariant: case kFp8PingPongVariant: case kFp8DeepVariant: case kFp8LazyVariant:
    case kFp8PinVariant: case kFp8ThreeWGVariant: case kFp8VtVariant:
      return launch_fwd_fp8_wide(args, variant, num_sms, stream);
    default: return cudaErrorNotSupported;
  }
}

}  // namespace ga::cuda::flash_detail
