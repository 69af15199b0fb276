// Instantiations of the sm_75 (Turing) build of the mma.sync flash forward, fp16 only (Turing tensor cores have no
// bf16 mma), head dims 64, 96, 128, 256: see flash_fwd_sm80.cuh (kTuring). One file for all of them: fp16 alone keeps it
// as small as one of the sm_80 per-head-dim files. Compiled for every arch of the list: the kernel uses only sm_75
// instructions (ldmatrix, mma.sync m16n8k8, no cp.async), so Hopper runs it too (variant kFlashSm75Variant).
#include "backends/cuda/kernels/flash/flash_fwd_sm80.cuh"

namespace ga::cuda::flash_sm80 {

template <>
cudaError_t launch_fwd_sm75<64>(const FwdSm80Args& args, int batch, cudaStream_t stream) {
  return launch_fwd_sm80_instance<false, 64, true>(args, batch, stream);
}
template <>
cudaError_t launch_fwd_sm75<96>(const FwdSm80Args& args, int batch, cudaStream_t stream) {
  return launch_fwd_sm80_instance<false, 96, true>(args, batch, stream);
}
template <>
cudaError_t launch_fwd_sm75<128>(const FwdSm80Args& args, int batch, cudaStream_t stream) {
  return launch_fwd_sm80_instance<false, 128, true>(args, batch, stream);
}
template <>
cudaError_t launch_fwd_sm75<256>(const FwdSm80Args& args, int batch, cudaStream_t stream) {
  return launch_fwd_sm80_instance<false, 256, true>(args, batch, stream);
}

}  // namespace ga::cuda::flash_sm80
