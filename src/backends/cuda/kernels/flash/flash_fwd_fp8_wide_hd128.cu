// Instantiations of the FP8 (e4m3) forward's 224-key variants at head dim 128 (flash_fwd_launch.h kFp8*Variant):
// the persistent overlap kernel with FA3's 224-key FP8 tile and the split-chain softmax (29, the hd 128 FP8 default,
// in every build), and the candidates measured against it (benchmark builds: GA_FLASH_FP8_WIDE): the 224-key tile
// alone (28), 29 + ping-pong (32), 29 with a 3-deep K/V ring (33), 29 + the lazy O rescale (34), 29 with the PV
// wait pinned below the softmax (43), three consumer warpgroups on 192 x 128 tiles (48) and 29 with V^T made in the
// kernel (58). Their own translation unit, so the build compiles them beside flash_fwd_fp8_hd128.cu
// instead of after it.
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

cudaError_t launch_fwd_fp8_wide(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kStages = default_stages<128>(), kWide = fp8_wide_block_n();
  constexpr ElemKind E = ElemKind::kE4m3;
  constexpr int kTree = 1 | kSchedFp8TreeSoftmax;
  switch (variant) {
    case kFp8TreeVariant: return launch_fwd_instance<E, 128, kTree, true, kStages, kWide>(args, num_sms, stream);
#if GA_FLASH_FP8_WIDE
    case kFp8VtVariant:
      return launch_fwd_instance<E, 128, kTree | kSchedFp8VtInKernel, true, kStages, kWide>(args, num_sms, stream);
    case kFp8WideVariant: return launch_fwd_instance<E, 128, 1, true, kStages, kWide>(args, num_sms, stream);
    case kFp8PingPongVariant:
      return launch_fwd_instance<E, 128, 2 | kSchedFp8TreeSoftmax, true, kStages, kWide>(args, num_sms, stream);
    case kFp8DeepVariant: return launch_fwd_instance<E, 128, kTree, true, 3, kWide>(args, num_sms, stream);
    case kFp8LazyVariant:
      return launch_fwd_instance<E, 128, kTree | kSchedLazyRescale, true, kStages, kWide>(args, num_sms, stream);
    case kFp8PinVariant:
      return launch_fwd_instance<E, 128, kTree | kSchedPinPvWait, true, kStages, kWide>(args, num_sms, stream);
    case kFp8ThreeWGVariant:
      return launch_fwd_instance<E, 128, kSchedFp8TreeSoftmax | kSchedThreeWG, true, kStages, 128>(args, num_sms,
                                                                                                    stream);
#endif
    default: return cudaErrorNotSupported;
  }
}

}  // namespace ga::cuda::flash_detail
