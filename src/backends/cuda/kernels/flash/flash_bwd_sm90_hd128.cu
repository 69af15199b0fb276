// Instantiations of the Hopper flash backward for head dim 128 (bf16, fp16): see flash_bwd_sm90.cuh. The only head
// dim the Hopper backward is built for; flash_backward sends the others to the mma.sync kernels (flash_bwd_hd*.cu).
// CI builds only the default schedule's kernel (26: 19's kernel with a TMA-store epilogue; each
// instantiation is a heavy wgmma kernel);
// -DGA_FLASH_ALL_VARIANTS=ON (or GA_FLASH_BWD_VARIANTS=1 alone, without the forward's variants) adds schedule 1
// (FA3's order, both warpgroups in lockstep), the A/B of the wide preprocess (12), the preprocess/convert-only timing
// runs (8, 9, 10) and the ping-pong schedules (16, 17, 18 = 16 without the dQ reduction, timing only; 20, 21: variants
// of 19; flash_bwd_sm90_pingpong.cuh), for benchmarks; 22-24 (19's kernel with another launch: the causal work order,
// programmatic dependent launches) cost no kernel of their own and are in every build; 25 (19's steps in persistent
// CTAs: 10-30% slower) in the variants build; -DGA_FLASH_BWD_OLD_SCHEDULES=1 the schedules measured slower and
// dropped (0, 2, 3, 4, 6, 7: their code stays in consumer_main for a rerun).
#include "backends/cuda/kernels/flash/flash_bwd_sm90.cuh"

#ifndef GA_FLASH_ALL_VARIANTS
#define GA_FLASH_ALL_VARIANTS 0
#endif
#ifndef GA_FLASH_BWD_VARIANTS
#define GA_FLASH_BWD_VARIANTS GA_FLASH_ALL_VARIANTS
#endif
#ifndef GA_FLASH_BWD_OLD_SCHEDULES
#define GA_FLASH_BWD_OLD_SCHEDULES 0
#endif

namespace ga::cuda::flash_bwd_sm90 {
namespace {

template <int kSched>
cudaError_t launch_sched(const flash_bwd::BwdArgs& args, const Args& m, float* lse_log2, bool bf16,
                         cudaStream_t stream) {
  return bf16 ? launch_instance<true, 128, kSched>(args, m, lse_log2, stream)
              : launch_instance<false, 128, kSched>(args, m, lse_log2, stream);
}

}  // namespace

template <>
cudaError_t launch<128>(const flash_bwd::BwdArgs& args, const Args& m, float* lse_log2, bool bf16, int sched,
                        cudaStream_t stream) {
  if (sched < 0 || sched == kDefaultSched) return launch_sched<kDefaultSched>(args, m, lse_log2, bf16, stream);
  switch (sched) {  // the default's kernel with other launches or epilogue (no kernel of their own): in every build
    case kPingPongSharedDqSched: return launch_sched<kPingPongSharedDqSched>(args, m, lse_log2, bf16, stream);
    case kLptSched: return launch_sched<kLptSched>(args, m, lse_log2, bf16, stream);
    case kPdlSched: return launch_sched<kPdlSched>(args, m, lse_log2, bf16, stream);
    case kLptPdlSched: return launch_sched<kLptPdlSched>(args, m, lse_log2, bf16, stream);
    default: break;
  }
#if GA_FLASH_BWD_VARIANTS
  switch (sched) {
    case kPersistentSched: return launch_sched<kPersistentSched>(args, m, lse_log2, bf16, stream);
    case kFa3OrderSched: return launch_sched<kFa3OrderSched>(args, m, lse_log2, bf16, stream);
    case kRowPre: return launch_sched<kRowPre>(args, m, lse_log2, bf16, stream);
    case kPreOnly: return launch_sched<kPreOnly>(args, m, lse_log2, bf16, stream);
    case kWidePreOnly: return launch_sched<kWidePreOnly>(args, m, lse_log2, bf16, stream);
    case kPrePostOnly: return launch_sched<kPrePostOnly>(args, m, lse_log2, bf16, stream);
    case kPingPongSched: return launch_sched<kPingPongSched>(args, m, lse_log2, bf16, stream);
    case kSplitDqSched: return launch_sched<kSplitDqSched>(args, m, lse_log2, bf16, stream);
    case kPingPongNoDqSched: return launch_sched<kPingPongNoDqSched>(args, m, lse_log2, bf16, stream);
    case kPingPongRotatedSched: return launch_sched<kPingPongRotatedSched>(args, m, lse_log2, bf16, stream);
    case kPingPongEarlyDvSched: return launch_sched<kPingPongEarlyDvSched>(args, m, lse_log2, bf16, stream);
    default: break;
  }
#endif
#if GA_FLASH_BWD_OLD_SCHEDULES  // measured slower and dropped (the figures: flash_bwd_sm90.cuh, Sched)
  switch (sched) {
    case 0: return launch_sched<0>(args, m, lse_log2, bf16, stream);
    case 2: return launch_sched<2>(args, m, lse_log2, bf16, stream);
    case 3: return launch_sched<3>(args, m, lse_log2, bf16, stream);
    case 4: return launch_sched<4>(args, m, lse_log2, bf16, stream);
    case kPreRowConvertOnly: return launch_sched<kPreRowConvertOnly>(args, m, lse_log2, bf16, stream);
    case kRowConvert: return launch_sched<kRowConvert>(args, m, lse_log2, bf16, stream);
    default: break;
  }
#endif
  return cudaErrorNotSupported;
}

}  // namespace ga::cuda::flash_bwd_sm90
