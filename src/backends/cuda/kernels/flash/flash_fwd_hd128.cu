// Instantiations of the Hopper forward for head dim 128 (bf16, fp16; every schedule): see flash_fwd_launch.h.
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"

namespace ga::cuda::flash_detail {

template <>
cudaError_t launch_fwd<128>(const FwdArgs& args, bool bf16, int sched, int n_head, int batch, cudaStream_t stream) {
  return bf16 ? launch_fwd_sched<ElemKind::kBf16, 128>(args, sched, n_head, batch, stream)
              : launch_fwd_sched<ElemKind::kF16, 128>(args, sched, n_head, batch, stream);
}

}  // namespace ga::cuda::flash_detail
