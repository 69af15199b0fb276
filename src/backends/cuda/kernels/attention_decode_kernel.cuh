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
//
// Sliding window (AttentionParams::window_left): the KV range of a run is [pos0 - window_left, pos0 + n_q), cut into
// the splits as the whole cache was (each CTA computes it from the pos0 it reads, so graph replay still holds), and
// the host sizes the split count and workspace from the window's length (attention.cu kv_len_bound): a 4k window over
// a 32k cache splits like a 4k cache. Only the slices that straddle a row's window start are masked (StepMask). With
// soft-capping off and no window the step takes the same loops (two uniform tests per slice). ptxas -v before / after
// (sm_90a): paged hd 128 3-stage (the default) 235 -> 243 registers, no spill, 2 CTAs per SM as before; contiguous
// hd 128 168 (capped at 170 for 3 CTAs per SM), no spill; hd 64 121 -> 128; hd 256, which spilled before, 204 -> 236
// bytes (contiguous) and 112 -> 132 (paged).
//
// Cluster merge (paged, sm_90, 2..8 splits): the splits of one (run, KV head, row tile) are
// launched as one thread-block cluster. Each CTA leaves its partial (o, max, sum) in its own shared
// memory, a cluster barrier publishes them, and every CTA of the cluster finishes a slice of the tile's
// outputs reading its peers' partials through distributed shared memory (cluster_merge). That takes
// the workspace round trip (partial stores, __threadfence, the counter's atomic, two dependent L2 reads
// by the last CTA) off the tail of a one-wave call, where nothing overlaps it: at batch 16 (2 splits,
// 256 CTAs, all starting and ending together) the tail is part of the ~15 us per call that does not
// scale with the keys (H200, bench_attention).
//
// Start of a paged CTA: the run's bounds, the block-table loads of its first three tiles
// and the copies of its first tiles that hold only keys below pos0 go out BEFORE the wait for the
// previous kernel (attention.h states what callers guarantee for that), so a CTA that the PDL launch
// made resident while the previous kernel drains has its first tiles in flight when it is released;
// q (written by the previous kernel) is loaded after the wait. In the per-CTA timeline the release ->
// first tile latency was 4.6 us at b1 with everything after the wait.
//
// The FP8 cache (kFp8; attention_decode_fp8.cu instantiates it): the same kernel, its stages holding E4M3 codes and
// scales (attention_detail.cuh), kFp8DecodeStages of them; after a tile lands each warp dequantizes its own 16
// keys into f16 rows of a per-CTA tile and runs the same flash step on them (a __syncwarp, no extra barrier). A
// tile is half the bytes, so with the same CTAs in flight the cache streams in about half the time.
#pragma once

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
  // them into weights: one L2 round trip on the tail of the call instead of two.
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
    // finite: the split holding the row's own position saw a visible key
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
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
  // The accumulators: each thread takes kElems of the tile's valid (row, dim) elements at a time and
  // issues the loads of kSplitBatch splits for all of them before the first use (32 independent L2
  // reads in flight). One element and 8 splits at a time (the first version) cost a dependent round
  // trip per 8 splits per element: 6.8 us from the last tile to the last exit at b1 (16 splits, 4 rows).
  // The sums run over the splits in the same order as before (bit-identical results).
  constexpr int kElems = 4, kSplitBatch = 8;
  const int n_elems = min(kMmaRows, rows - tile_row0) * HD;  // valid rows first, in idx order
  for (int e0 = static_cast<int>(threadIdx.x); e0 < n_elems; e0 += kElems * kAttnThreads) {
    int64_t ws_off[kElems];  // the element's offset in split 0's accumulators
    int row_of[kElems];
    bool valid[kElems];
    float o[kElems];
#pragma unroll
    for (int k = 0; k < kElems; ++k) {
      const int idx = e0 + k * kAttnThreads;
      valid[k] = idx < n_elems;
      row_of[k] = valid[k] ? idx / HD : 0;
      const int r = tile_row0 + row_of[k];
      ws_off[k] = ((ws_tok0 + r / a.group) * a.n_head + kv_head * a.group + r % a.group) * HD + idx % HD;
      o[k] = 0.0f;
    }
    for (int sp0 = 0; sp0 < a.n_splits; sp0 += kSplitBatch) {
      float x[kSplitBatch][kElems];
#pragma unroll
      for (int b = 0; b < kSplitBatch; ++b) {
#pragma unroll
        for (int k = 0; k < kElems; ++k) {
          x[b][k] = valid[k] && sp0 + b < a.n_splits ? __ldcg(&a.ws_o[(sp0 + b) * rows_total * HD + ws_off[k]]) : 0.0f;
        }
      }
#pragma unroll
      for (int b = 0; b < kSplitBatch; ++b) {
        if (sp0 + b >= a.n_splits) break;
#pragma unroll
        for (int k = 0; k < kElems; ++k) o[k] += sm_w[row_of[k] * kMaxSplits + sp0 + b] * x[b][k];
      }
    }
#pragma unroll
    for (int k = 0; k < kElems; ++k) {
      if (!valid[k]) break;  // valid elements come first
      const int idx = e0 + k * kAttnThreads;
      const int r = tile_row0 + row_of[k];
      const int64_t t = tok0 + r / a.group;
      const int head = kv_head * a.group + r % a.group;
      a.out[t * a.out_stride + int64_t{head} * HD + idx % HD] = o[k] / sm_l[row_of[k]];
    }
  }
}

// The cluster form of the split merge (paged, sm_90): the n_splits CTAs of one (run, KV head, row tile)
// form one cluster, rank = split. Each has written its partial for the tile's valid rows into its own
// shared memory: sm_o [kMmaRows][HD] (unnormalized output), sm_ml [kMmaRows][2] (max in log2 units,
// sum). After the barrier, rank k finishes elements [k * share, (k + 1) * share) of the tile's
// [kMmaRows][HD] outputs from every rank's partial (distributed shared memory), the arithmetic of
// merge_if_last; the second barrier keeps every CTA's shared memory alive until its peers are done.
template <int HD>
__device__ __forceinline__ void cluster_merge(const AttnArgs& a, int64_t tok0, int kv_head, int row_tile, int rows,
                                              const float* sm_o, const float* sm_ml) {
  cluster_barrier();
  const int n = a.n_splits;  // 2..kMaxClusterSplits: the cluster size
  const int share = (kMmaRows * HD + n - 1) / n;
  const int first = static_cast<int>(cluster_rank()) * share;
  const int last = min(first + share, kMmaRows * HD);
  const int tile_row0 = row_tile * kMmaRows;
  for (int idx = first + static_cast<int>(threadIdx.x); idx < last; idx += kAttnThreads) {
    const int row = idx / HD, d = idx % HD;
    const int r = tile_row0 + row;
    if (r >= rows) break;  // rows ascend with idx
    float ms[kMaxClusterSplits], ls[kMaxClusterSplits], os[kMaxClusterSplits];
    float m = -INFINITY;
#pragma unroll
    for (int sp = 0; sp < kMaxClusterSplits; ++sp) {  // every load issued before the first use
      ms[sp] = -INFINITY;
      ls[sp] = os[sp] = 0.0f;
      if (sp < n) {
        ms[sp] = ld_cluster_f32(cluster_peer_addr(sm_ml + 2 * row, static_cast<unsigned>(sp)));
        ls[sp] = ld_cluster_f32(cluster_peer_addr(sm_ml + 2 * row + 1, static_cast<unsigned>(sp)));
        os[sp] = ld_cluster_f32(cluster_peer_addr(sm_o + idx, static_cast<unsigned>(sp)));
      }
    }
#pragma unroll
    for (int sp = 0; sp < kMaxClusterSplits; ++sp) m = fmaxf(m, ms[sp]);  // finite: some split saw the row's key
    float l = 0.0f, o = 0.0f;
#pragma unroll
    for (int sp = 0; sp < kMaxClusterSplits; ++sp) {
      const float w = exp2f(ms[sp] - m);  // 0 for a split that saw no key of this row
      l += w * ls[sp];
      o += w * os[sp];
    }
    const int64_t t = tok0 + r / a.group;
    const int head = kv_head * a.group + r % a.group;
    a.out[t * a.out_stride + int64_t{head} * HD + d] = o / l;
  }
  cluster_barrier();
}

// The benchmark's per-CTA timeline (AttentionParams::decode_trace): thread 0 of each CTA writes
// slot[k] = %globaltimer at mark k (0 entry, 1 after the wait for the previous kernel, 2 first tile
// landed, 3 last tile done, 4 exit), slot[5] = SM id, slot[6] = tiles. Null (the engine): nothing.
struct DecodeTrace {
  unsigned long long* slot = nullptr;
  __device__ __forceinline__ void mark(int k) const {
    if (slot != nullptr && threadIdx.x == 0) slot[k] = global_timer_ns();
  }
  __device__ __forceinline__ void note(int k, unsigned long long value) const {
    if (slot != nullptr && threadIdx.x == 0) slot[k] = value;
  }
};

// 3 CTAs per SM for head_dim <= 128 with 2 stages (registers capped at 170): more cache bytes in
// flight per SM; 2 CTAs per SM with 3 stages (104 KB of stages each).
// Shared memory of a decode CTA: the K/V stages (F16 tiles, or FP8 stages plus the f16 tiles they dequantize into).
template <int HD, int kStages, bool kFp8>
constexpr size_t decode_smem_bytes() {
  if constexpr (kFp8) {
    return size_t{kStages} * fp8_stage_bytes<HD>() + size_t{2} * kAttnTileKeys * smem_row_halves<HD>() * sizeof(__half);
  } else {
    return attn_smem_bytes<HD, kStages>();
  }
}
// The FP8 decode kernel's stages: 3 (2 CTAs per SM at head_dim <= 128, two 8 KB + 8 KB tiles in flight each).
inline constexpr int kFp8DecodeStages = kFp8DecodeStagesCount;

template <int HD, bool kPaged, int kStages, bool kFp8 = false>
__global__ void __launch_bounds__(kAttnThreads, HD <= 128 ? (kStages == 2 ? 3 : 2) : 1)
    attention_decode_kernel(const AttnArgs a) {
  DecodeTrace trace;
  if constexpr (kPaged) {
    if (a.trace != nullptr) {
      trace.slot = a.trace + 8 * (blockIdx.x + gridDim.x * (blockIdx.y + int64_t{gridDim.y} * blockIdx.z));
    }
  }
  trace.mark(0);
  if constexpr (!kPaged) {
    pdl_wait_prior_grid();  // launched after the previous kernel (pdl.cuh): its outputs are ready from here
    pdl_allow_dependents();  // after the wait: triggering first measured slower
    trace.mark(1);
  }
  extern __shared__ __align__(16) unsigned char attn_smem[];
  constexpr int kKeysPerWarp = kAttnTileKeys / kAttnWarps;
  __half* const smem = reinterpret_cast<__half*>(attn_smem);  // [K stages][V stages] of [64][HD + 8]

  const int split = static_cast<int>(blockIdx.x);
  const int kv_head = static_cast<int>(blockIdx.y);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, c = lane % 4;
  KvPipeline<HD, kPaged, kStages, kFp8> pipe;
  // kFp8: the f16 tiles each warp dequantizes its keys into, after the stages ([64][HD + 8] K, then V)
  __half* const deq_k = reinterpret_cast<__half*>(attn_smem + (kFp8 ? kStages * fp8_stage_bytes<HD>() : 0));
  __half* const deq_v = deq_k + kAttnTileKeys * smem_row_halves<HD>();
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
    // this (run, KV head, row tile) leaves here (before the PDL wait: it writes nothing), so its merge
    // counter is never touched
    if (run.n_q < 1 || run.n_q > kDecodeMaxTokens || row_tile * kMmaRows >= run.n_q * a.group) return;
    // (a whole cluster leaves here together: its CTAs differ only in the split)
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

  // The keys any token of the run sees: [kv_first, kv_len) (a sliding window starts at its first token's
  // window; the keys below it are never read), cut into n_splits chunks.
  const int64_t kv_first = a.window_left >= 0 ? max(pos0 - a.window_left, int64_t{0}) : 0;
  int64_t chunk = (kv_len - kv_first + a.n_splits - 1) / a.n_splits;
  chunk = (chunk + kSplitKeyGranule - 1) / kSplitKeyGranule * kSplitKeyGranule;
  const int64_t begin = kv_first + int64_t{split} * chunk;
  const int64_t end = min(begin + chunk, kv_len);

  const int tile_row0 = row_tile * kMmaRows;
  const int n_tiles = static_cast<int>((end - begin + kAttnTileKeys - 1) / kAttnTileKeys);
  if constexpr (kPaged) {
    // Before the wait for the previous kernel (attention.h's contract): the run's metadata above, the
    // block-table loads of the first tiles and the copies of the first tiles whose keys all lie below
    // pos0 (cache rows of earlier steps; the kernel before writes only the rows of the new tokens).
    int issued = 0;
    if (begin < kv_len) {
      point_kv_pipeline(pipe, smem, a, kv_head, begin, end);
      issued = pipe.start_stable(n_tiles, pos0);
    }
    pdl_wait_prior_grid();
    pdl_allow_dependents();
    trace.mark(1);
    if (begin < kv_len) pipe.start_rest(n_tiles, issued);
  }
  const bool cluster = kPaged && a.cluster_merge != 0;  // (the contiguous kernel compiles without it)
  // The cluster merge's partial of this CTA, after the warp-merge buffers below (the stages are free then).
  float* const sm_part_o = reinterpret_cast<float*>(attn_smem) + kAttnWarps * kMmaRows * (HD + 2);  // [16][HD]
  float* const sm_part_ml = sm_part_o + kMmaRows * HD;                                             // [16][2]
  if (begin >= kv_len) {  // an empty trailing split: max -inf, sum 0 and zero accumulators
    if (cluster) {
      for (int idx = static_cast<int>(threadIdx.x); idx < kMmaRows * HD; idx += kAttnThreads) {
        sm_part_o[idx] = 0.0f;
        if (idx < kMmaRows) {
          sm_part_ml[2 * idx] = -INFINITY;
          sm_part_ml[2 * idx + 1] = 0.0f;
        }
      }
      trace.mark(3);
      cluster_merge<HD>(a, run.tok0, kv_head, row_tile, rows, sm_part_o, sm_part_ml);
      trace.mark(4);
      return;
    }
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

  StepMask mask;
  mask.softcap_log2 = a.softcap_log2;
  const float* q_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = tile_row0 + g + 8 * i;
    const bool valid = r < rows;
    const int t = r / a.group;
    const int head = kv_head * a.group + r % a.group;
    mask.lim[i] = valid ? min(pos0 + t, end - 1) : -1;
    mask.lo[i] = a.window_left >= 0 ? static_cast<int>(pos0 + t - a.window_left) : 0;
    q_row[i] = valid ? a.q + (run.tok0 + t) * a.q_stride + int64_t{head} * HD : nullptr;
  }
  const int64_t min_lim = min(pos0 + tile_row0 / a.group, end - 1);  // the smallest limit of a valid row
  // the largest lower bound of a valid row (its last one's): keys below it are masked for some row
  const int64_t max_lo =
      a.window_left >= 0 ? pos0 + min(tile_row0 + kMmaRows - 1, rows - 1) / a.group - a.window_left : 0;

  // The first tile's copies go out before the q loads, whose latency they then hide (paged: above).
  uint32_t qf[HD / 16][4];
  WarpRows<HD> st;
  if constexpr (kPaged) {
    load_q_fragments<HD>(qf, q_row[0], q_row[1], a.q_scale);
    st.init();
  } else {
    start_kv_and_q(pipe, smem, a, kv_head, begin, end, n_tiles, q_row, qf, st);
  }
  trace.note(6, static_cast<unsigned long long>(n_tiles));
  trace.note(5, sm_id());
  for (int i = 0; i < n_tiles; ++i) {
    pipe.issue_next(i, n_tiles);
    __syncthreads();
    if (i == 0) trace.mark(2);
    const int64_t key0 = pipe.tile_start(i) + warp * kKeysPerWarp;
    if (key0 < end) {  // a slice wholly past the chunk would be fully masked: skip it
      const int slice = warp * kKeysPerWarp * smem_row_halves<HD>();
      mask.upper = key0 + kKeysPerWarp - 1 > min_lim;
      mask.lower = key0 < max_lo;
      if constexpr (kFp8) {
        pipe.dequantize(i, deq_k, deq_v, warp * kKeysPerWarp, kKeysPerWarp, lane, 32);
        __syncwarp();  // the warp's rows are written by its own lanes only
        warp_flash_step<HD, kKeysPerWarp>(st, qf, deq_k + slice, deq_v + slice, key0, mask);
      } else {
        warp_flash_step<HD, kKeysPerWarp>(st, qf, pipe.k_stage(i) + slice, pipe.v_stage(i) + slice, key0, mask);
      }
    }
    pipe.map_ahead(i, n_tiles);
    __syncthreads();
  }
  reduce_row_sums<HD>(st);
  trace.mark(3);

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
      a.out[t * a.out_stride + int64_t{head} * HD + d] = o / l;  // one split saw every key, its own too: l > 0
    } else if (cluster) {
      sm_part_o[idx] = o;
      if (d == 0) {
        sm_part_ml[2 * row] = m;
        sm_part_ml[2 * row + 1] = l;
      }
    } else {
      const int64_t ws_row = int64_t{split} * rows_total + (ws_tok0 + r / a.group) * a.n_head + head;
      a.ws_o[ws_row * HD + d] = o;
      if (d == 0) {
        a.ws_ml[2 * ws_row] = m;
        a.ws_ml[2 * ws_row + 1] = l;
      }
    }
  }
  if (a.n_splits > 1 && cluster) {
    cluster_merge<HD>(a, run.tok0, kv_head, row_tile, rows, sm_part_o, sm_part_ml);  // its barrier orders the above
  } else if (a.n_splits > 1) {
    __syncthreads();  // the warp-merge buffers in shared memory are read above; merge_if_last reuses them
    merge_if_last<HD>(a, run.tok0, ws_tok0, done_base, kv_head, row_tile, rows, attn_smem);
  }
  trace.mark(4);
}

template <int HD, bool kPaged, int kStages, bool kFp8 = false>
cudaError_t launch_decode_kernel(const AttnArgs& a, int row_tiles, cudaStream_t stream) {
  constexpr size_t smem = decode_smem_bytes<HD, kStages, kFp8>();
  static_assert(smem >= (kAttnWarps * kMmaRows * (HD + 2)) * sizeof(float), "the warp merge reuses the stages");
  static_assert(smem >= (kMmaRows * (2 * kMaxSplits + 1)) * sizeof(float), "the split merge reuses the stages");
  static_assert(smem >= (kAttnWarps * kMmaRows * (HD + 2) + kMmaRows * (HD + 2)) * sizeof(float),
                "the cluster merge's partial sits after the warp-merge buffers");
  auto* kernel = attention_decode_kernel<HD, kPaged, kStages, kFp8>;
  cudaError_t status = set_attention_smem(kernel, smem);
  if (status != cudaSuccess) return status;
  const unsigned z = kPaged ? static_cast<unsigned>(a.n_seqs) * static_cast<unsigned>(a.seq_row_tiles)
                            : static_cast<unsigned>(row_tiles);
  const dim3 grid(static_cast<unsigned>(a.n_splits), static_cast<unsigned>(a.n_head_kv), z);
  if (!a.cluster_merge) return launch_after_prior(kernel, grid, dim3(kAttnThreads), smem, stream, a);
  // the splits of one (run, KV head, row tile) as one cluster (cluster_merge), after the previous kernel (pdl.cuh)
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(kAttnThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2] = {};
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(a.n_splits);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  attribute[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 2;
  status = cudaLaunchKernelEx(&config, kernel, a);
  return status != cudaSuccess ? status : cudaGetLastError();
}

template <int HD, bool kPaged, int kStages, bool kFp8 = false>
int occupancy_of_decode_kernel() {
  constexpr size_t smem = decode_smem_bytes<HD, kStages, kFp8>();
  auto* kernel = attention_decode_kernel<HD, kPaged, kStages, kFp8>;
  int n = 0;
  if (set_attention_smem(kernel, smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kAttnThreads, smem) != cudaSuccess ||
      n < 1) {
    (void)cudaGetLastError();
    return 1;
  }
  return n;
}

}  // namespace ga::cuda::detail
