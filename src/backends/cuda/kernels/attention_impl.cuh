// Launch side of the CUDA attention: the head_dim dispatch, the decode/prefill choice and the split
// count of the decode path, shared by attention.cu (validation, workspace) and the kernel files
// (attention_decode.cu, attention_prefill.cu hold the kernels and their explicit instantiations).
//
// The split count depends only on values fixed when a CUDA graph is captured (n_tokens, the heads,
// the cache capacity when pos0 lives on the device), never on the device-side pos0, so one captured
// graph is right for every decode step; each CTA derives its key range from pos0 at run time.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_detail.cuh"

namespace ga::cuda::detail {

inline constexpr int kDecodeMaxTokens = 8;       // n_tokens up to this take the split-KV decode path
inline constexpr int kPrefillRows = kAttnWarps * kMmaRows;  // query rows per prefill CTA (64)
inline constexpr int64_t kMinKeysPerSplit = 128;  // below this, another split costs more than it saves
inline constexpr int kSplitKeyGranule = 16;       // chunks are whole warp slices (kAttnTileKeys / kAttnWarps)
inline constexpr int kMaxSplits = 256;

inline bool attention_uses_decode(const AttentionParams& p) { return p.n_tokens <= kDecodeMaxTokens; }

inline int decode_row_tiles(const AttentionParams& p) {
  const int64_t rows = int64_t{p.n_tokens} * (p.n_head / p.n_head_kv);
  return static_cast<int>((rows + kMmaRows - 1) / kMmaRows);
}

// CTAs along the KV range for a cache of up to kv_len_bound positions: as many as fit on the GPU at
// once (n_head_kv x row tiles x splits <= resident CTAs per SM x SMs: one full wave, no half-empty
// second wave) but no split shorter than kMinKeysPerSplit.
inline int decode_splits(const AttentionParams& p, int64_t kv_len_bound, int resident_ctas) {
  const int64_t ctas_per_split = int64_t{p.n_head_kv} * decode_row_tiles(p);
  const int64_t want = resident_ctas / ctas_per_split;
  const int64_t useful = (kv_len_bound + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  return static_cast<int>(std::clamp<int64_t>(std::min(want, useful), 1, kMaxSplits));
}

// The split-KV workspace starts with the completion counters of the fused merge (one per KV head and
// row tile of the largest decode batch), at the same place and of the same size for every batch of a
// model: a caller shares one zero-filled workspace between batch sizes, and only the counters must
// stay zero between calls (each call leaves them so); the partials after them are scratch.
inline int decode_done_stride(const AttentionParams& p) {
  const int64_t max_rows = int64_t{kDecodeMaxTokens} * (p.n_head / p.n_head_kv);
  return static_cast<int>((max_rows + kMmaRows - 1) / kMmaRows);
}
inline size_t decode_done_bytes(const AttentionParams& p) {
  const size_t bytes = static_cast<size_t>(p.n_head_kv) * static_cast<size_t>(decode_done_stride(p)) * sizeof(unsigned);
  return (bytes + 255) / 256 * 256;
}
inline size_t decode_workspace_bytes(const AttentionParams& p, int n_splits) {
  if (n_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(p.n_tokens) * static_cast<size_t>(p.n_head);
  return decode_done_bytes(p) +
         static_cast<size_t>(n_splits) * rows * (static_cast<size_t>(p.head_dim) + 2) * sizeof(float);
}

// Calls f(std::integral_constant<int, HD>{}) for a supported head_dim; cudaErrorNotSupported else
// (attention_unsupported_reason says so in words first).
template <class F>
cudaError_t visit_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
    default: return cudaErrorNotSupported;
  }
}

// Opts a kernel into `bytes` of dynamic shared memory and asks for the largest shared-memory carveout,
// so several CTAs of ~70 KB fit on one SM (the occupancy the split count is sized for).
template <class Kernel>
cudaError_t set_attention_smem(Kernel* kernel, size_t bytes) {
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (status != cudaSuccess) return status;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}

// Defined and instantiated (HD 64, 128, 256) in attention_decode.cu / attention_prefill.cu.
template <int HD>
cudaError_t launch_attention_decode(const AttnArgs& a, int row_tiles, cudaStream_t stream);
template <int HD>
cudaError_t launch_attention_prefill(const AttnArgs& a, cudaStream_t stream);
// Decode CTAs one SM holds at once (the occupancy calculator; 1 if it fails).
template <int HD>
int decode_ctas_per_sm();

#define GA_ATTN_EXTERN(HD)                                                                   \
  extern template cudaError_t launch_attention_decode<HD>(const AttnArgs&, int, cudaStream_t); \
  extern template cudaError_t launch_attention_prefill<HD>(const AttnArgs&, cudaStream_t);   \
  extern template int decode_ctas_per_sm<HD>();
GA_ATTN_EXTERN(64)
GA_ATTN_EXTERN(128)
GA_ATTN_EXTERN(256)
#undef GA_ATTN_EXTERN

}  // namespace ga::cuda::detail
