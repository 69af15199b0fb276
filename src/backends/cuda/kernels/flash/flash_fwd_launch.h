// Internal seam between the host API (flash_forward.cu) and the per-head-dim instantiation files
// (flash_fwd_hd*.cu): one .cu per head dim keeps each translation unit small and lets the build
// compile them in parallel (DESIGN.md: sharded instantiations).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/flash/flash_fwd_sm90.cuh"

namespace ga::cuda::flash_detail {

// Kernel variants flash_forward_with_schedule can pick (flash_fwd_sm90.cuh): consumer schedule
// (0 serial, 1 intra-warpgroup overlap, 2 overlap + ping-pong), persistent tile scheduler or one tile
// per CTA, default or deep K/V ring. Measured against each other in docs/results/2026-11-22-h200-flash.md.
struct FwdVariant {
  int sched;
  bool persistent;
  bool deep;
};
constexpr int kFwdVariants = 7;
// The default build compiles only the variants default_variant picks (1 and 4): every instantiation is a
// heavy wgmma kernel and CI compiles them on two cores. -DGA_FLASH_ALL_VARIANTS=ON adds the others for
// benchmarking them against each other.
#ifndef GA_FLASH_ALL_VARIANTS
#define GA_FLASH_ALL_VARIANTS 0
#endif
constexpr bool variant_compiled(int variant) {
  return variant == 1 || variant == 4 || (GA_FLASH_ALL_VARIANTS && variant >= 0 && variant < kFwdVariants);
}
constexpr FwdVariant kFwdVariantTable[kFwdVariants] = {
    {0, false, false}, {1, false, false}, {2, false, false},  // 0-2: the first version's schedules
    {0, true, false},  {1, true, false},  {2, true, false},   // 3-5: persistent
    {2, true, true},                                          // 6: persistent ping-pong, deep ring
};

// What flash_forward runs: the fastest variant of the H200 measurement (docs/results/2026-11-22-h200-flash.md,
// FA3 methodology). Short key ranges: persistent overlap (4): the per-tile prologue/epilogue is a large
// share of a short tile and the persistent CTA hides it. Long ones: one tile per CTA with overlap (1):
// the static persistent split of long causal tiles is uneven (up to 30% slower at 16k) and the hardware
// block scheduler balances them; for full attention at >= 8k the two are within 1-3%. Ping-pong (2, 5,
// 6) was never more than 2% ahead of overlap alone here and often behind.
constexpr int default_variant(int head_dim, bool causal, int seqlen_k) {
  const int persistent_up_to = (head_dim == 256 && !causal) ? 2048 : 4096;
  return seqlen_k <= persistent_up_to ? 4 : 1;
}

// FP8 variants (flash_fwd_fp8_hd*.cu compile only these): hd 128 the same two as default_variant (1, 4);
// hd 256 their serial twins (0, 3): with 128-key tiles the overlapped consumer at hd 256 holds O (128 regs),
// S (64) and P (16) at once and ptxas spills; serial compiles with 0 spills.
constexpr int fp8_default_variant(int head_dim, bool causal, int seqlen_k) {
  const int v = default_variant(head_dim, causal, seqlen_k);
  return head_dim == 256 ? (v == 4 ? 3 : 0) : v;
}
constexpr bool fp8_variant_compiled(int head_dim, int variant) {
  return head_dim == 128 ? (variant == 1 || variant == 4) : head_dim == 256 ? (variant == 0 || variant == 3) : false;
}

// Launches the forward of head dim HD; num_sms sizes the persistent grid.
template <int HD>
cudaError_t launch_fwd(const FwdArgs& args, bool bf16, int variant, int num_sms, cudaStream_t stream);
// FP8 e4m3 (args.tm_v maps V^T in the workspace): head dims 128 and 256 only (flash_fwd_fp8_hd*.cu), variants
// 1 and 4 only (the ones default_variant picks): the sizes, and the CI build stays lean.
template <int HD>
cudaError_t launch_fwd_fp8(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream);

template <ElemKind E, int HD, int kSched, bool kPersistent, int kStages>
cudaError_t launch_fwd_instance(const FwdArgs& args, int num_sms, cudaStream_t stream) {
  const auto kernel = flash_fwd_sm90_kernel<E, HD, kSched, kPersistent, kStages>;
  constexpr size_t smem = FwdTraits<HD, kStages, elem_bytes<E>()>::kSmemBytes;
  static_assert(smem <= 227 * 1024, "shared memory per CTA");
  static const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr_status != cudaSuccess) return attr_status;
  const int ctas = kPersistent ? (args.total_tiles < num_sms ? args.total_tiles : num_sms) : args.total_tiles;
  kernel<<<dim3(static_cast<unsigned>(ctas)), FwdTraits<HD>::kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

template <ElemKind E, int HD>
cudaError_t launch_fwd_variant(const FwdArgs& args, int variant, int num_sms, cudaStream_t stream) {
  constexpr int kDefault = default_stages<HD>(), kDeep = deep_stages<HD>();
  (void)kDeep;
  switch (variant) {
    case 1: return launch_fwd_instance<E, HD, 1, false, kDefault>(args, num_sms, stream);
    case 4: return launch_fwd_instance<E, HD, 1, true, kDefault>(args, num_sms, stream);
#if GA_FLASH_ALL_VARIANTS
    case 0: return launch_fwd_instance<E, HD, 0, false, kDefault>(args, num_sms, stream);
    case 2: return launch_fwd_instance<E, HD, 2, false, kDefault>(args, num_sms, stream);
    case 3: return launch_fwd_instance<E, HD, 0, true, kDefault>(args, num_sms, stream);
    case 5: return launch_fwd_instance<E, HD, 2, true, kDefault>(args, num_sms, stream);
    case 6: return launch_fwd_instance<E, HD, 2, true, kDeep>(args, num_sms, stream);
#endif
    default: return cudaErrorNotSupported;  // not compiled in this build (flash_variant_compiled)
  }
}

}  // namespace ga::cuda::flash_detail
