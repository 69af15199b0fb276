// Prefill attention (n_tokens > 8): FlashAttention-2 style with mma.sync tensor cores (sm_80+).
//
// Grid: (query row tiles of 64, n_head_kv). A CTA's 64 rows are (token, query head) pairs of one GQA
// group (rows r = t * G + g, attention_detail.cuh), so each K/V tile staged in shared memory serves
// all G query heads of the KV head. Each of the 4 warps owns 16 rows, keeps its q fragments in
// registers and its online-softmax state (max, sum, output accumulators) in registers, and walks the
// keys the CTA needs ([0, pos0 + last token]) in tiles of 64 staged by cp.async (16-byte copies,
// double-buffered: tile i + 1 is in flight while tile i is computed). Causal masking runs only on
// tiles that reach past the warp's first visible limit; warps whose rows end earlier skip the tail.
// Row tiles are issued last-first because causal work grows with the row index (the longest CTAs
// start first and the short ones fill the tail).
// A sliding window (window_left) moves the start of the CTA's keys to the window of its first row, so
// the tiles below it are never copied; a warp skips the tiles wholly below its own rows' windows and
// masks those that straddle one (attention_detail.cuh, StepMask).
//
// Paged form (kPaged, attention.h): grid x walks a list of (run, row tile) pairs: run s owns the
// entries [T(s), T(s + 1)) with T(s) = floor(seq_q_start[s] * G / 64) + s, which is at least its
// ceil(n_q * G / 64) row tiles and sums to floor(n_tokens * G / 64) + n_seqs for the whole batch, so
// the grid is sized from host-known numbers and a CTA finds its run by a binary search over
// seq_q_start (a few L2 hits, once). Runs of <= prefill_min_q tokens belong to the decode launch and
// their entries return at once. K/V come through the run's block table (KvPipeline).
//
// Not FA3: no wgmma/TMA and no warp specialization (a later Hopper milestone); correctness for any
// n_tokens / pos0 (a prompt continuing a cache) is the contract here.
//
// The FP8 cache (kFp8; attention_fp8.cu instantiates it): FP8 stages (attention_detail.cuh) and one f16 tile the
// CTA's threads dequantize each staged tile into before the warps' steps read it (one barrier more per tile).
#pragma once

#include "backends/cuda/kernels/attention_impl.cuh"

namespace ga::cuda::detail {

// The run of paged tile-list entry x (see above): the largest s with T(s) <= x.
__device__ __forceinline__ int paged_prefill_run(const AttnArgs& a, int64_t x) {
  int lo = 0, hi = a.n_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    const int64_t start = min(max(__ldg(a.seq_q_start + mid), 0), a.n_tokens);
    if (start * a.group / kPrefillRows + mid <= x) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Shared memory of a prefill CTA: the K/V stages (F16 tiles, or FP8 stages plus the f16 tile they dequantize into).
template <int HD, bool kFp8>
constexpr size_t prefill_smem_bytes() {
  if constexpr (kFp8) {
    return size_t{kAttnStages} * fp8_stage_bytes<HD>() +
           size_t{2} * kAttnTileKeys * smem_row_halves<HD>() * sizeof(__half);
  } else {
    return attn_smem_bytes<HD>();
  }
}

template <int HD, bool kPaged, bool kFp8 = false>
__global__ void __launch_bounds__(kAttnThreads) attention_prefill_kernel(const AttnArgs a) {
  extern __shared__ __align__(16) unsigned char attn_smem[];
  __half* const smem = reinterpret_cast<__half*>(attn_smem);  // [K stages][V stages] of [64][HD + 8]
  // kFp8: the f16 K and V tiles the staged codes are dequantized into, after the stages
  __half* const deq_k = reinterpret_cast<__half*>(attn_smem + (kFp8 ? kAttnStages * fp8_stage_bytes<HD>() : 0));
  __half* const deq_v = deq_k + kAttnTileKeys * smem_row_halves<HD>();

  const int kv_head = static_cast<int>(blockIdx.y);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, c = lane % 4;
  KvPipeline<HD, kPaged, kAttnStages, kFp8> pipe;
  int row_tile = 0;
  SeqRun run{};
  if constexpr (kPaged) {
    __shared__ int32_t paged_rows[2 * kAttnTileKeys];
    const int64_t x = int64_t{gridDim.x} - 1 - blockIdx.x;  // later runs' last tiles first
    const int seq = paged_prefill_run(a, x);
    run = paged_run(a, seq);
    row_tile = static_cast<int>(x - (run.tok0 * a.group / kPrefillRows + seq));
    if (run.n_q <= a.prefill_min_q || row_tile * kPrefillRows >= run.n_q * a.group) return;
    pipe.block_size = a.block_size;
    pipe.max_block = a.n_kv_blocks_max;
    pipe.table = run.table;
    pipe.rows = paged_rows;
  } else {
    row_tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // heaviest (latest rows) first
    run.n_q = a.n_tokens;
    run.pos0 = attn_pos0(a);
  }
  const int64_t pos0 = run.pos0;
  const int rows = run.n_q * a.group;

  const int cta_row0 = row_tile * kPrefillRows;
  const int cta_last_row = min(cta_row0 + kPrefillRows - 1, rows - 1);
  const int64_t cta_kv_end = pos0 + cta_last_row / a.group + 1;  // keys [cta_kv_first, cta_kv_end) are needed
  const bool window = a.window_left >= 0;
  const int64_t cta_kv_first = window ? max(pos0 + cta_row0 / a.group - a.window_left, int64_t{0}) : 0;
  const int n_tiles = static_cast<int>((cta_kv_end - cta_kv_first + kAttnTileKeys - 1) / kAttnTileKeys);

  // This warp's rows: g and g + 8 of [warp_row0, warp_row0 + 16).
  const int warp_row0 = cta_row0 + warp * kMmaRows;
  const bool warp_active = warp_row0 < rows;
  const int warp_last_t = min(warp_row0 + kMmaRows - 1, rows - 1) / a.group;
  const int64_t warp_min_lim = pos0 + warp_row0 / a.group;
  const int64_t warp_kv_end = pos0 + warp_last_t + 1;
  // the window of the warp's first row starts lowest, that of its last row highest
  const int64_t warp_min_lo = window ? pos0 + warp_row0 / a.group - a.window_left : 0;
  const int64_t warp_max_lo = window ? pos0 + warp_last_t - a.window_left : 0;
  StepMask mask;
  mask.softcap_log2 = a.softcap_log2;
  const float* q_row[2];
  float* out_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp_row0 + g + 8 * i;
    const bool valid = r < rows;
    const int64_t t = run.tok0 + r / a.group;
    const int head = kv_head * a.group + r % a.group;
    mask.lim[i] = valid ? pos0 + r / a.group : -1;
    mask.lo[i] = window ? static_cast<int>(pos0 + r / a.group - a.window_left) : 0;
    q_row[i] = valid ? a.q + t * a.q_stride + int64_t{head} * HD : nullptr;
    out_row[i] = valid ? a.out + t * a.out_stride + int64_t{head} * HD : nullptr;
  }

  // The first tile's copies go out before the q loads, whose latency they then hide.
  uint32_t qf[HD / 16][4];
  WarpRows<HD> st;
  start_kv_and_q(pipe, smem, a, kv_head, cta_kv_first, cta_kv_end, n_tiles, q_row, qf, st);
  for (int i = 0; i < n_tiles; ++i) {
    pipe.issue_next(i, n_tiles);
    __syncthreads();
    if constexpr (kFp8) {
      pipe.dequantize(i, deq_k, deq_v, 0, kAttnTileKeys, static_cast<int>(threadIdx.x), kAttnThreads);
      __syncthreads();  // every warp reads every key of the tile
    }
    const int64_t tile_start = pipe.tile_start(i);
    // tiles past the warp's last row's key, or wholly below its first row's window, are skipped
    if (warp_active && tile_start < warp_kv_end && tile_start + kAttnTileKeys > warp_min_lo) {
      mask.upper = tile_start + kAttnTileKeys - 1 > warp_min_lim;
      mask.lower = tile_start < warp_max_lo;
      warp_flash_step<HD, kAttnTileKeys>(st, qf, kFp8 ? deq_k : pipe.k_stage(i), kFp8 ? deq_v : pipe.v_stage(i),
                                         tile_start, mask);
    }
    pipe.map_ahead(i, n_tiles);
    __syncthreads();  // the stage is overwritten by the copy issued next iteration
  }

  reduce_row_sums<HD>(st);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (out_row[i] == nullptr) continue;
    const float inv = 1.0f / st.l[i];  // a row's own position is visible to it: l > 0
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      *reinterpret_cast<float2*>(out_row[i] + j * 8 + 2 * c) =
          make_float2(st.acc[j][2 * i] * inv, st.acc[j][2 * i + 1] * inv);
    }
  }
}

template <int HD, bool kFp8>
cudaError_t launch_prefill_kernel(const AttnArgs& a, cudaStream_t stream) {
  constexpr size_t smem = prefill_smem_bytes<HD, kFp8>();
  const bool paged = a.block_table != nullptr;
  auto* kernel = paged ? attention_prefill_kernel<HD, true, kFp8> : attention_prefill_kernel<HD, false, kFp8>;
  cudaError_t status = set_attention_smem(kernel, smem);
  if (status != cudaSuccess) return status;
  const int64_t rows = int64_t{a.n_tokens} * a.group;
  const int64_t tiles = paged ? rows / kPrefillRows + a.n_seqs : (rows + kPrefillRows - 1) / kPrefillRows;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(a.n_head_kv));
  kernel<<<grid, kAttnThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template <int HD>
cudaError_t launch_attention_prefill(const AttnArgs& a, cudaStream_t stream) {
  return launch_prefill_kernel<HD, false>(a, stream);
}
}  // namespace ga::cuda::detail
