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
inline constexpr int kMaxClusterSplits = 8;       // the cluster merge's largest split count (portable cluster size)

// cp.async stages of the paged decode kernel at head_dim 128 when AttentionParams::decode_stages is
// 0: 3 (2 CTAs per SM, two tiles in flight per CTA) beat 2 (3 CTAs per SM, one tile in flight) at
// every batch of the H200 sweep (bench_attention, GQA 32/8, 4096 positions per sequence):
// b16 83.8 -> 80.6 us, b32 151.9 -> 143.7 us, b64 303.5 -> 276.0 us, b1 15.7 -> 15.2 us. Every other
// (head_dim, form) uses 2 stages (not measured with 3). The 3-stage kernel is compiled only when it
// is the default or the build asks for the benchmark variants (GA_ATTN_DECODE_VARIANTS).
inline constexpr int kPagedDecodeStagesHd128 = 3;
#if defined(GA_ATTN_DECODE_VARIANTS)
inline constexpr bool kPagedDecode3StagesBuilt = true;
#else
inline constexpr bool kPagedDecode3StagesBuilt = kPagedDecodeStagesHd128 == 3;
#endif

inline bool attention_is_paged(const AttentionParams& p) { return p.block_table != nullptr; }
inline bool attention_is_fp8(const AttentionParams& p) { return p.kv_dtype == AttentionParams::KvDType::kFp8; }
// The head dims with FP8-cache kernels (attention_fp8.cu): one instantiation per (head dim, form, phase).
__host__ __device__ constexpr bool fp8_kv_head_dim_supported(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}
// The FP8 decode kernel's stage count (attention_decode_kernel.cuh kFp8DecodeStages; the split policy's input).
inline constexpr int kFp8DecodeStagesCount = 3;

// Which launches a call needs. Contiguous: one, by n_tokens. Paged: the decode kernel unless every
// run may be a prompt chunk of one sequence; the prefill kernel when a run may exceed 8 tokens.
inline bool attention_uses_decode(const AttentionParams& p) {
  if (!attention_is_paged(p)) return p.n_tokens <= kDecodeMaxTokens;
  return p.max_seq_tokens <= kDecodeMaxTokens || p.n_seqs > 1;
}
inline bool attention_uses_prefill(const AttentionParams& p) {
  if (!attention_is_paged(p)) return p.n_tokens > kDecodeMaxTokens;
  return p.max_seq_tokens > kDecodeMaxTokens;
}
// The prefill part on the Hopper flash kernel (attention_hopper.cu): whether p selects it (p already
// validated), and the launch of runs of more than min_q tokens.
bool hopper_prefill_selected(const AttentionParams& p);
cudaError_t launch_hopper_prefill(const AttentionParams& p, int min_q, cudaStream_t stream);
// Paged decode: query tokens per run the decode kernel takes (and its workspace rows per run).
inline int paged_decode_q(const AttentionParams& p) { return std::min(p.max_seq_tokens, kDecodeMaxTokens); }

// The decode kernel's stage count for p: p.decode_stages, or the default above.
inline int decode_stages(const AttentionParams& p) {
  if (attention_is_fp8(p)) return kFp8DecodeStagesCount;
  if (p.decode_stages > 0) return p.decode_stages;
  return p.block_table != nullptr && p.head_dim == 128 ? kPagedDecodeStagesHd128 : 2;
}
// Whether a decode kernel of `stages` stages exists for (head_dim, form) in this build (attention_decode.cu).
bool decode_stages_supported(int head_dim, bool paged, int stages);

// Row tiles of 16 per decode CTA column: of the whole call (contiguous) or of one run (paged).
inline int decode_row_tiles(const AttentionParams& p) {
  const int tokens = attention_is_paged(p) ? paged_decode_q(p) : p.n_tokens;
  const int64_t rows = int64_t{tokens} * (p.n_head / p.n_head_kv);
  return static_cast<int>((rows + kMmaRows - 1) / kMmaRows);
}

// CTAs along the KV range for `ctas_per_split` (KV head, row tile, run) columns over caches of up
// to kv_len_bound positions.
// Contiguous form (one sequence, a handful of columns): as many as fit on the GPU at once (columns x
// splits <= resident CTAs: one full wave, no half-empty second wave), no split shorter than
// kMinKeysPerSplit (tuned on the H200 for the Session's decode).
// Paged form, from the forced-split sweep of bench_attention (H200, 32/8 heads, 4096 positions per
// run): with fewer columns than resident CTAs,
// about two CTAs per SM of the three that fit beat a full wave (b16: 2 splits 79% of copy, 3 splits
// 76%) and splits under 256 keys cost more than they bring (b1: 16 splits 16.3 us, 32 splits 18.9 us);
// with a full wave of columns already (64 runs x 8 KV heads = 512 CTAs) the count of 1..4 that
// wastes least of the last wave wins (b64: 1 split 76%, 2-4 splits 87%). The 3-stage paged kernel
// (2 CTAs per SM) fills its resident slots instead: the same two CTAs per SM; its sweep
// has the policy's count as the best forced count at b1 (16), b16 (2), b32 (1) and b64 (1).
inline int decode_splits_for(int64_t ctas_per_split, int64_t kv_len_bound, int resident_ctas, int forced, bool paged,
                             int stages) {
  const int64_t min_keys = paged ? 2 * kMinKeysPerSplit : kMinKeysPerSplit;
  const int64_t useful = (kv_len_bound + min_keys - 1) / min_keys;
  int64_t want = resident_ctas / ctas_per_split;
  if (forced > 0) {
    want = forced;
  } else if (paged && ctas_per_split >= resident_ctas) {
    int64_t best_waves = 0;  // minimize waves / splits = (time per column), compared as fractions
    for (int64_t splits = 1; splits <= 4; ++splits) {
      const int64_t waves = (ctas_per_split * splits + resident_ctas - 1) / resident_ctas;
      if (splits == 1 || waves * want < best_waves * splits) {
        want = splits;
        best_waves = waves;
      }
    }
  } else if (paged && stages == 2) {
    want = 2 * int64_t{resident_ctas} / (3 * ctas_per_split);
  }
  return static_cast<int>(std::clamp<int64_t>(std::min(want, useful), 1, kMaxSplits));
}
inline int decode_splits(const AttentionParams& p, int64_t kv_len_bound, int resident_ctas) {
  const bool paged = attention_is_paged(p);
  const int64_t seqs = paged ? p.n_seqs : 1;
  return decode_splits_for(seqs * p.n_head_kv * decode_row_tiles(p), kv_len_bound, resident_ctas, p.decode_splits,
                           paged, decode_stages(p));
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
// Paged form: counters [n_seqs][n_head_kv][row tiles] at the start, partials (splits x n_seqs x
// paged_decode_q rows) at the END of the caller's workspace. A smaller call (fewer runs, shorter
// caches) has at most as many counters and at most as many partial bytes as the bound below, so its
// counters never overlap the partials an earlier call left: one zero-filled workspace serves all.
inline size_t paged_done_bytes(const AttentionParams& p) {
  const size_t n = static_cast<size_t>(p.n_seqs) * static_cast<size_t>(p.n_head_kv) *
                   static_cast<size_t>(decode_row_tiles(p)) * sizeof(unsigned);
  return (n + 255) / 256 * 256;
}
inline size_t paged_partial_bytes(const AttentionParams& p, int n_seqs, int n_splits) {
  if (n_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(n_seqs) * static_cast<size_t>(paged_decode_q(p)) * static_cast<size_t>(p.n_head);
  const size_t bytes = static_cast<size_t>(n_splits) * rows * (static_cast<size_t>(p.head_dim) + 2) * sizeof(float);
  return (bytes + 15) / 16 * 16;
}
// The largest partials of any call within p's bounds: at most p.n_seqs runs, at most
// decode_row_tiles(p) row tiles per run (the split count is not monotonic in the columns).
inline size_t paged_partial_bound(const AttentionParams& p, int64_t kv_len_bound, int resident_ctas) {
  size_t most = 0;
  for (int n = 1; n <= p.n_seqs; ++n) {
    for (int tiles = 1; tiles <= decode_row_tiles(p); ++tiles) {
      const int splits =
          decode_splits_for(int64_t{n} * p.n_head_kv * tiles, kv_len_bound, resident_ctas, p.decode_splits, true,
                            decode_stages(p));
      most = std::max(most, paged_partial_bytes(p, n, splits));
    }
  }
  return most;
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
    case 96: return f(std::integral_constant<int, 96>{});  // Phi-3
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

// Defined and instantiated (HD 64, 96, 128, 256) in attention_decode.cu / attention_prefill.cu.
template <int HD>
cudaError_t launch_attention_decode(const AttnArgs& a, int row_tiles, cudaStream_t stream);
template <int HD>
cudaError_t launch_attention_prefill(const AttnArgs& a, cudaStream_t stream);
// Decode CTAs (of the `stages`-stage kernel) one SM holds at once (the occupancy calculator; 1 if it fails).
template <int HD>
int decode_ctas_per_sm(int stages);
// Whether the paged decode kernel of `stages` stages can run its splits as clusters on the current
// device (sm_90 device and binary; AttentionParams::decode_merge).
template <int HD>
bool decode_cluster_merge_supported(int stages);

// The FP8 cache's kernels (attention_fp8.cu), for the head dims of fp8_kv_head_dim_supported.
template <int HD>
cudaError_t launch_attention_decode_fp8(const AttnArgs& a, int row_tiles, cudaStream_t stream);
template <int HD>
cudaError_t launch_attention_prefill_fp8(const AttnArgs& a, cudaStream_t stream);
template <int HD>
int decode_fp8_ctas_per_sm();
#define GA_ATTN_FP8_EXTERN(HD)                                                                        \
  extern template cudaError_t launch_attention_decode_fp8<HD>(const AttnArgs&, int, cudaStream_t); \
  extern template cudaError_t launch_attention_prefill_fp8<HD>(const AttnArgs&, cudaStream_t);     \
  extern template int decode_fp8_ctas_per_sm<HD>();
GA_ATTN_FP8_EXTERN(64)
GA_ATTN_FP8_EXTERN(128)
GA_ATTN_FP8_EXTERN(256)
#undef GA_ATTN_FP8_EXTERN

#define GA_ATTN_EXTERN(HD)                                                                   \
  extern template cudaError_t launch_attention_decode<HD>(const AttnArgs&, int, cudaStream_t); \
  extern template cudaError_t launch_attention_prefill<HD>(const AttnArgs&, cudaStream_t);   \
  extern template int decode_ctas_per_sm<HD>(int);                                            \
  extern template bool decode_cluster_merge_supported<HD>(int);
GA_ATTN_EXTERN(64)
GA_ATTN_EXTERN(96)
GA_ATTN_EXTERN(128)
GA_ATTN_EXTERN(256)
#undef GA_ATTN_EXTERN

}  // namespace ga::cuda::detail
