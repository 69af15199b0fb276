// Decode attention (n_tokens 1..8, the hot path of generation): split-KV flash-decoding.
//
// Decode reads the whole KV cache to produce a handful of rows, so it is bound by memory bandwidth
// and by how many SMs stream the cache at once. Grid: (splits, n_head_kv, row tiles of 16). A CTA
// takes one chunk of the KV range of one KV head and ALL the (token, query head) rows of that head's
// GQA group (rows r = t * G + g; more than 16 rows take more row tiles, which re-read the chunk from
// L2), so each KV byte comes from DRAM once per KV head. The chunk is staged into shared memory with
// 16-byte cp.async copies, double-buffered (the paged form at head_dim 128: 3 stages, 2 CTAs per SM,
// attention_impl.cuh), and the 4 warps split each 64-key tile (16 keys each):
// every warp keeps its own online-softmax state for the 16 rows, and at the end the 4 states are
// merged through shared memory. With one split the CTA writes the normalized output; otherwise it
// writes its partial (output accumulators, max, sum) to the workspace, and the LAST CTA of its
// (KV head, row tile) to finish (a counter in the workspace) combines the splits by log-sum-exp
// (merge_if_last). A separate merge kernel cost a launch per layer: ~3-4 us on an H200 (ncu), a
// third of the attention's time in a decode step at short caches.
//
// Tensor cores (mma.sync) do the products even for a single row: a 16-row mma wastes 15/16 of its
// work at G * n_tokens = 1, but it still runs far below the rate the memory can feed, and it keeps
// GQA groups of 4-8 heads x 8 tokens (32-64 rows) off the FP32 pipes.
//
// The split count comes from the cache capacity (attention_impl.cuh); each CTA computes its chunk
// from the pos0 it reads at run time (device pos0 for graph replay). Chunks are rounded to whole
// warp slices (16 keys), so trailing splits may be empty: they write max -inf (weight 0 in the
// merge) and zero accumulators. The split count fills exactly one wave of resident CTAs (the
// occupancy calculator's count), so no half-empty second wave doubles the time.
//
// The paged form (kPaged, attention.h) is the same kernel with a sequence index folded into grid z
// (z = seq * seq_row_tiles + row tile): each CTA reads its run's token range and pos0, skips runs
// of more than 8 tokens (the prefill launch's) and copies K/V through the run's block table
// (KvPipeline, attention_detail.cuh). Splits are sized from n_seqs * n_head_kv * row tiles, so with
// many sequences (64 x 8 KV heads = 512 CTAs) the grid is already full and the splits shrink to 1-2.
#include "backends/cuda/kernels/attention_impl.cuh"
#include "backends/cuda/kernels/pdl.cuh"

namespace ga::cuda::detail {

// Called by every CTA of a split decode after writing its partial. The CTA that completes its
// (KV head, row tile) writes out[t][head] = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s for the
// tile's rows (a split that saw no key of a row has m_s = -inf: weight 0, zero accumulators) and
// resets the counter for the next call (graph replay). The classic threadfence-reduction handshake:
// partial stores, __threadfence, then the count; the last CTA reads the partials through L2 (__ldcg:
// its SM's L1 may hold lines of an earlier call). The split weights go to shared memory first (one
// warp per row), so the accumulator loads of all splits are independent and in flight together.
template <int HD>
__device__ __forceinline__ void merge_if_last(const AttnArgs& a, int64_t tok0, int64_t ws_tok0, unsigned* done_base,
                                              int kv_head, int row_tile, int rows, unsigned char* smem_bytes) {
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* done = done_base + int64_t{kv_head} * a.done_stride + row_tile;
    is_last = atomicAdd(done, 1u) == static_cast<unsigned>(a.n_splits - 1);
    if (is_last) *done = 0u;  // every CTA of this call has counted: nobody else touches it now
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();

  // The (max, sum) pairs are read from L2 once, as float2, and parked in shared memory by the lane that then turns
  // them into weights: one L2 round trip on the tail of the call instead of two (session 3, Turing engineer).
  float* const sm_w = reinterpret_cast<float*>(smem_bytes);  // [kMmaRows][kMaxSplits] split max, then weight
  float* const sm_ls = sm_w + kMmaRows * kMaxSplits;         // [kMmaRows][kMaxSplits] split sums
  float* const sm_l = sm_ls + kMmaRows * kMaxSplits;         // [kMmaRows] sum of the weighted sums
  const int64_t rows_total = a.ws_rows_total;
  const int tile_row0 = row_tile * kMmaRows;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const float2* const ws_ml2 = reinterpret_cast<const float2*>(a.ws_ml);  // [n_splits][rows_total] (max, sum)
  for (int row = warp; row < kMmaRows; row += kAttnWarps) {
    const int r = tile_row0 + row;
    if (r >= rows) break;
    const int64_t ws_row = (ws_tok0 + r / a.group) * a.n_head + kv_head * a.group + r % a.group;
    float m = -INFINITY;
    for (int sp = lane; sp < a.n_splits; sp += 32) {
      const float2 ml = __ldcg(ws_ml2 + sp * rows_total + ws_row);
      sm_w[row * kMaxSplits + sp] = ml.x;
      sm_ls[row * kMaxSplits + sp] = ml.y;
      m = fmaxf(m, ml.x);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));  // finite: split 0 saw key 0
    float l = 0.0f;
    for (int sp = lane; sp < a.n_splits; sp += 32) {  // the entries this lane wrote above
      const float w = exp2f(sm_w[row * kMaxSplits + sp] - m);
      sm_w[row * kMaxSplits + sp] = w;
      l += w * sm_ls[row * kMaxSplits + sp];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
    if (lane == 0) sm_l[row] = l;
  }
  __syncthreads();
  for (int idx = static_cast<int>(threadIdx.x); idx < kMmaRows * HD; idx += kAttnThreads) {
    const int row = idx / HD, d = idx % HD;
    const int r = tile_row0 + row;
    if (r >= rows) break;  // rows ascend with idx
    const int64_t t = tok0 + r / a.group;
    const int head = kv_head * a.group + r % a.group;
    const int64_t ws_row = (ws_tok0 + r / a.group) * a.n_head + head;
    float o = 0.0f;
#pragma unroll 8
    for (int sp = 0; sp < a.n_splits; ++sp) {
      o += sm_w[row * kMaxSplits + sp] * __ldcg(&a.ws_o[(sp * rows_total + ws_row) * HD + d]);
    }
    a.out[t * a.out_stride + int64_t{head} * HD + d] = o / sm_l[row];
  }
}

// 3 CTAs per SM for head_dim <= 128 with 2 stages (registers capped at 170): more cache bytes in
// flight per SM; 2 CTAs per SM with 3 stages (104 KB of stages each).
template <int HD, bool kPaged, int kStages>
__global__ void __launch_bounds__(kAttnThreads, HD <= 128 ? (kStages == 2 ? 3 : 2) : 1)
    attention_decode_kernel(const AttnArgs a) {
  pdl_wait_prior_grid();  // launched after the previous kernel (pdl.cuh): its outputs are ready from here
  pdl_allow_dependents();  // after the wait: triggering first measured slower (session 3, run 2)
  extern __shared__ __align__(16) unsigned char attn_smem[];
  constexpr int kKeysPerWarp = kAttnTileKeys / kAttnWarps;
  __half* const smem = reinterpret_cast<__half*>(attn_smem);  // [K stages][V stages] of [64][HD + 8]

  const int split = static_cast<int>(blockIdx.x);
  const int kv_head = static_cast<int>(blockIdx.y);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, c = lane % 4;
  KvPipeline<HD, kPaged, kStages> pipe;
  int row_tile = 0;
  SeqRun run{};
  unsigned* done_base = a.done;
  int64_t ws_tok0 = 0;  // the run's first row of the split workspace (in tokens)
  if constexpr (kPaged) {
    __shared__ int32_t paged_rows[2 * kAttnTileKeys];
    const int seq = static_cast<int>(blockIdx.z) / a.seq_row_tiles;
    row_tile = static_cast<int>(blockIdx.z) % a.seq_row_tiles;
    run = paged_run(a, seq);
    // a run for the prefill launch (or skipped), or a row tile past this run's rows: every split of
    // this (run, KV head, row tile) leaves here, so its merge counter is never touched
    if (run.n_q < 1 || run.n_q > kDecodeMaxTokens || row_tile * kMmaRows >= run.n_q * a.group) return;
    done_base += int64_t{seq} * a.n_head_kv * a.done_stride;
    ws_tok0 = int64_t{seq} * a.ws_q_per_seq;
    pipe.block_size = a.block_size;
    pipe.max_block = a.n_kv_blocks_max;
    pipe.table = run.table;
    pipe.rows = paged_rows;
  } else {
    row_tile = static_cast<int>(blockIdx.z);
    run.tok0 = 0;
    run.n_q = a.n_tokens;
    run.pos0 = attn_pos0(a);
  }
  const int64_t pos0 = run.pos0;
  const int64_t kv_len = pos0 + run.n_q;
  const int rows = run.n_q * a.group;
  const int64_t rows_total = a.ws_rows_total;  // workspace rows per split: (ws_tok0 + t) * n_head + head

  int64_t chunk = (kv_len + a.n_splits - 1) / a.n_splits;
  chunk = (chunk + kSplitKeyGranule - 1) / kSplitKeyGranule * kSplitKeyGranule;
  const int64_t begin = int64_t{split} * chunk;
  const int64_t end = min(begin + chunk, kv_len);

  const int tile_row0 = row_tile * kMmaRows;
  if (begin >= kv_len) {  // an empty trailing split: max -inf, sum 0 and zero accumulators
    for (int idx = static_cast<int>(threadIdx.x); idx < kMmaRows * HD; idx += kAttnThreads) {
      const int r = tile_row0 + idx / HD, d = idx % HD;
      if (r >= rows) break;
      const int64_t ws_row = int64_t{split} * rows_total + (ws_tok0 + r / a.group) * a.n_head + kv_head * a.group +
                             r % a.group;
      a.ws_o[ws_row * HD + d] = 0.0f;
      if (d == 0) {
        a.ws_ml[2 * ws_row] = -INFINITY;
        a.ws_ml[2 * ws_row + 1] = 0.0f;
      }
    }
    merge_if_last<HD>(a, run.tok0, ws_tok0, done_base, kv_head, row_tile, rows, attn_smem);  // never alone
    return;
  }

  int64_t lim[2];
  const float* q_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = tile_row0 + g + 8 * i;
    const bool valid = r < rows;
    const int t = r / a.group;
    const int head = kv_head * a.group + r % a.group;
    lim[i] = valid ? min(pos0 + t, end - 1) : -1;
    q_row[i] = valid ? a.q + (run.tok0 + t) * a.q_stride + int64_t{head} * HD : nullptr;
  }
  const int64_t min_lim = min(pos0 + tile_row0 / a.group, end - 1);  // the smallest limit of a valid row

  // The first tile's copies go out before the q loads, whose latency they then hide.
  const int n_tiles = static_cast<int>((end - begin + kAttnTileKeys - 1) / kAttnTileKeys);
  uint32_t qf[HD / 16][4];
  WarpRows<HD> st;
  start_kv_and_q(pipe, smem, a, kv_head, begin, end, n_tiles, q_row, qf, st);
  for (int i = 0; i < n_tiles; ++i) {
    pipe.issue_next(i, n_tiles);
    __syncthreads();
    const int64_t key0 = pipe.tile_start(i) + warp * kKeysPerWarp;
    if (key0 < end) {  // a slice wholly past the chunk would be fully masked: skip it
      const int slice = warp * kKeysPerWarp * smem_row_halves<HD>();
      warp_flash_step<HD, kKeysPerWarp>(st, qf, pipe.k_stage(i) + slice, pipe.v_stage(i) + slice, key0, lim,
                                        key0 + kKeysPerWarp - 1 > min_lim);
    }
    pipe.map_ahead(i, n_tiles);
    __syncthreads();
  }
  reduce_row_sums<HD>(st);

  // Merge the 4 warps' states through shared memory (the K/V stages are free now).
  float* const sm_acc = reinterpret_cast<float*>(attn_smem);  // [warps][16 rows][HD]
  float* const sm_m = sm_acc + kAttnWarps * kMmaRows * HD;    // [warps][16 rows]
  float* const sm_l = sm_m + kAttnWarps * kMmaRows;           // [warps][16 rows]
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = g + 8 * i;
    float* dst = sm_acc + (warp * kMmaRows + row) * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      *reinterpret_cast<float2*>(dst + j * 8 + 2 * c) = make_float2(st.acc[j][2 * i], st.acc[j][2 * i + 1]);
    }
    if (c == 0) {
      sm_m[warp * kMmaRows + row] = st.m[i];
      sm_l[warp * kMmaRows + row] = st.l[i];
    }
  }
  __syncthreads();
  for (int idx = static_cast<int>(threadIdx.x); idx < kMmaRows * HD; idx += kAttnThreads) {
    const int row = idx / HD, d = idx % HD;
    const int r = tile_row0 + row;
    if (r >= rows) break;  // rows ascend with idx
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) m = fmaxf(m, sm_m[w * kMmaRows + row]);
    float l = 0.0f, o = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kAttnWarps; ++w) {
        const float weight = exp2f(sm_m[w * kMmaRows + row] - m);
        l += weight * sm_l[w * kMmaRows + row];
        o += weight * sm_acc[(w * kMmaRows + row) * HD + d];
      }
    }
    const int64_t t = run.tok0 + r / a.group;
    const int head = kv_head * a.group + r % a.group;
    if (a.n_splits == 1) {
      a.out[t * a.out_stride + int64_t{head} * HD + d] = o / l;  // one split saw key 0: l > 0
    } else {
      const int64_t ws_row = int64_t{split} * rows_total + (ws_tok0 + r / a.group) * a.n_head + head;
      a.ws_o[ws_row * HD + d] = o;
      if (d == 0) {
        a.ws_ml[2 * ws_row] = m;
        a.ws_ml[2 * ws_row + 1] = l;
      }
    }
  }
  if (a.n_splits > 1) {
    __syncthreads();  // the warp-merge buffers in shared memory are read above; merge_if_last reuses them
    merge_if_last<HD>(a, run.tok0, ws_tok0, done_base, kv_head, row_tile, rows, attn_smem);
  }
}

template <int HD, bool kPaged, int kStages>
cudaError_t launch_decode_kernel(const AttnArgs& a, int row_tiles, cudaStream_t stream) {
  constexpr size_t smem = attn_smem_bytes<HD, kStages>();
  static_assert(smem >= (kAttnWarps * kMmaRows * (HD + 2)) * sizeof(float), "the warp merge reuses the stages");
  static_assert(smem >= (kMmaRows * (2 * kMaxSplits + 1)) * sizeof(float), "the split merge reuses the stages");
  auto* kernel = attention_decode_kernel<HD, kPaged, kStages>;
  cudaError_t status = set_attention_smem(kernel, smem);
  if (status != cudaSuccess) return status;
  const unsigned z = kPaged ? static_cast<unsigned>(a.n_seqs) * static_cast<unsigned>(a.seq_row_tiles)
                            : static_cast<unsigned>(row_tiles);
  const dim3 grid(static_cast<unsigned>(a.n_splits), static_cast<unsigned>(a.n_head_kv), z);
  return launch_after_prior(kernel, grid, dim3(kAttnThreads), smem, stream, a);
}

bool decode_stages_supported(int head_dim, bool paged, int stages) {
  if (stages == 2) return true;
  return stages == 3 && paged && head_dim == 128 && kPagedDecode3StagesBuilt;
}

template <int HD>
cudaError_t launch_attention_decode(const AttnArgs& a, int row_tiles, cudaStream_t stream) {
  const bool paged = a.block_table != nullptr;
  if (a.decode_stages == 3) {
    if constexpr (HD == 128 && kPagedDecode3StagesBuilt) {
      if (paged) return launch_decode_kernel<HD, true, 3>(a, row_tiles, stream);
    }
    return cudaErrorNotSupported;  // attention_unsupported_reason refuses it first
  }
  return paged ? launch_decode_kernel<HD, true, 2>(a, row_tiles, stream)
               : launch_decode_kernel<HD, false, 2>(a, row_tiles, stream);
}

// CTAs of the decode kernel of `stages` stages one SM holds (the occupancy calculator). The paged
// and contiguous 2-stage kernels differ only in a few registers of the copy path; the split policy
// asks the contiguous one, which both occupy the same way (checked by the benchmark's table).
template <int HD, bool kPaged, int kStages>
int occupancy_of_decode_kernel() {
  constexpr size_t smem = attn_smem_bytes<HD, kStages>();
  int n = 0;
  if (set_attention_smem(attention_decode_kernel<HD, kPaged, kStages>, smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attention_decode_kernel<HD, kPaged, kStages>, kAttnThreads,
                                                    smem) != cudaSuccess ||
      n < 1) {
    (void)cudaGetLastError();
    return 1;
  }
  return n;
}

template <int HD>
int decode_ctas_per_sm(int stages) {
  if constexpr (HD == 128 && kPagedDecode3StagesBuilt) {
    if (stages == 3) return occupancy_of_decode_kernel<HD, true, 3>();
  }
  (void)stages;
  return occupancy_of_decode_kernel<HD, false, 2>();
}

template int decode_ctas_per_sm<64>(int);
template int decode_ctas_per_sm<128>(int);
template int decode_ctas_per_sm<256>(int);
template cudaError_t launch_attention_decode<64>(const AttnArgs&, int, cudaStream_t);
template cudaError_t launch_attention_decode<128>(const AttnArgs&, int, cudaStream_t);
template cudaError_t launch_attention_decode<256>(const AttnArgs&, int, cudaStream_t);

}  // namespace ga::cuda::detail
