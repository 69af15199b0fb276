// The mma.sync prefill attention's F16-cache instantiations (the kernel and its design notes:
// attention_prefill_kernel.cuh; the FP8 cache's: attention_fp8.cu).
#include "backends/cuda/kernels/attention_prefill_kernel.cuh"

namespace ga::cuda::detail {


template cudaError_t launch_attention_prefill<64>(const AttnArgs&, cudaStream_t);
template cudaError_t launch_attention_prefill<96>(const AttnArgs&, cudaStream_t);
template cudaError_t launch_attention_prefill<128>(const AttnArgs&, cudaStream_t);
template cudaError_t launch_attention_prefill<256>(const AttnArgs&, cudaStream_t);

}  // namespace ga::cuda::detail
