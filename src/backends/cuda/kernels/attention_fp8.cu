// The attention kernels over an FP8 KV cache (AttentionParams::kv_dtype kFp8): the split-KV decode
// (attention_decode_kernel.cuh, kFp8DecodeStages stages) and the mma.sync prefill (attention_prefill_kernel.cuh),
// paged and contiguous, instantiated for the head dims of fp8_kv_head_dim_supported only (64, 128, 256): one FP8
// kernel per (head dim, form, phase), in a unit of its own so the default build compiles it beside the F16 units.
#include "backends/cuda/kernels/attention_decode_kernel.cuh"
#include "backends/cuda/kernels/attention_prefill_kernel.cuh"

namespace ga::cuda::detail {

template <int HD>
cudaError_t launch_attention_decode_fp8(const AttnArgs& a, int row_tiles, cudaStream_t stream) {
  static_assert(fp8_kv_head_dim_supported(HD), "an FP8 decode kernel for a head dim without one");
  return a.block_table != nullptr ? launch_decode_kernel<HD, true, kFp8DecodeStages, true>(a, row_tiles, stream)
                                  : launch_decode_kernel<HD, false, kFp8DecodeStages, true>(a, row_tiles, stream);
}

template <int HD>
cudaError_t launch_attention_prefill_fp8(const AttnArgs& a, cudaStream_t stream) {
  static_assert(fp8_kv_head_dim_supported(HD), "an FP8 prefill kernel for a head dim without one");
  return launch_prefill_kernel<HD, true>(a, stream);
}

// The split policy asks the contiguous kernel's occupancy, as decode_ctas_per_sm does for the F16 kernels.
template <int HD>
int decode_fp8_ctas_per_sm() {
  return occupancy_of_decode_kernel<HD, false, kFp8DecodeStages, true>();
}

#define GA_ATTN_FP8_INSTANCES(HD)                                                          \
  template cudaError_t launch_attention_decode_fp8<HD>(const AttnArgs&, int, cudaStream_t); \
  template cudaError_t launch_attention_prefill_fp8<HD>(const AttnArgs&, cudaStream_t);     \
  template int decode_fp8_ctas_per_sm<HD>();
GA_ATTN_FP8_INSTANCES(64)
GA_ATTN_FP8_INSTANCES(128)
GA_ATTN_FP8_INSTANCES(256)
#undef GA_ATTN_FP8_INSTANCES

}  // namespace ga::cuda::detail
