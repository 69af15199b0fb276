// Instantiations of the Hopper FP8 (e4m3) forward for head dim 256: the variants fp8_variant_compiled names
// (flash_fwd_launch.h): serial, one tile per CTA (0) and the default 39, the persistent overlap schedule with the
// split-chain softmax (O 128 + S 64 + P 16 registers per thread with 128-key tiles: ptxas spills 36 bytes, and it is
// still 9-17% faster than the persistent serial 3). Benchmark builds
// (GA_FLASH_FP8_WIDE) add 3, 39's twins 40 / 41 and 57 (39 with V^T made in the kernel); -DGA_FLASH_ALL_VARIANTS=ON (or
// GA_FLASH_FP8_ALL_VARIANTS=1) also serial + ping-pong (7, 8), measured against them.
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

template <>
cudaError_t launch_fwd_fp8<256>(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kStages = default_stages<256>();
  constexpr ElemKind E = ElemKind::kE4m3;
  switch (variant) {
    case 0: return launch_fwd_instance<E, 256, 0, false, kStages>(args, num_sms, stream);
    case kFp8Hd256OverlapVariant:
      return launch_fwd_instance<E, 256, 1 | kSchedFp8TreeSoftmax, true, kStages>(args, num_sms, stream);
#if GA_FLASH_FP8_WIDE
    case kFp8Hd256VtVariant:
      return launch_fwd_instance<E, 256, 1 | kSchedFp8TreeSoftmax | kSchedFp8VtInKernel, true, kStages>(args, num_sms,
                                                                                                      stream);
    case 3: return launch_fwd_instance<E, 256, 0, true, kStages>(args, num_sms, stream);
    case kFp8Hd256OneTileVariant:
      return launch_fwd_instance<E, 256, 1 | kSchedFp8TreeSoftmax, false, kStages>(args, num_sms, stream);
    case kFp8Hd256DeepVariant:
      return launch_fwd_instance<E, 256, 1 | kSchedFp8TreeSoftmax, true, 3>(args, num_sms, stream);
#endif
#if GA_FLASH_FP8_ALL_VARIANTS
    case 7: return launch_fwd_instance<E, 256, 3, false, kStages>(args, num_sms, stream);
    case 8: return launch_fwd_instance<E, 256, 3, true, kStages>(args, num_sms, stream);
#endif
    default: return cudaErrorNotSupported;
  }
}

}  // namespace ga::cuda::flash_detail
