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
//
// Not FA3: no wgmma/TMA and no warp specialization (a later Hopper milestone); correctness for any
// n_tokens / pos0 (a prompt continuing a cache) is the contract here.
#include "backends/cuda/kernels/attention_impl.cuh"

namespace ga::cuda::detail {

template <int HD>
__global__ void __launch_bounds__(kAttnThreads) attention_prefill_kernel(const AttnArgs a) {
  extern __shared__ __align__(16) unsigned char attn_smem[];
  constexpr int kTileHalves = kAttnTileKeys * smem_row_halves<HD>();
  __half* const smem = reinterpret_cast<__half*>(attn_smem);  // [K stages][V stages] of [64][HD + 8]

  const int kv_head = static_cast<int>(blockIdx.y);
  const int row_tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // heaviest (latest rows) first
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, c = lane % 4;
  const int64_t pos0 = attn_pos0(a);
  const int rows = a.n_tokens * a.group;

  const int cta_row0 = row_tile * kPrefillRows;
  const int cta_last_row = min(cta_row0 + kPrefillRows - 1, rows - 1);
  const int64_t cta_kv_end = pos0 + cta_last_row / a.group + 1;  // keys [0, cta_kv_end) are needed
  const int n_tiles = static_cast<int>((cta_kv_end + kAttnTileKeys - 1) / kAttnTileKeys);

  // This warp's rows: g and g + 8 of [warp_row0, warp_row0 + 16).
  const int warp_row0 = cta_row0 + warp * kMmaRows;
  const bool warp_active = warp_row0 < rows;
  const int64_t warp_min_lim = pos0 + warp_row0 / a.group;
  const int64_t warp_kv_end = pos0 + min(warp_row0 + kMmaRows - 1, rows - 1) / a.group + 1;
  int64_t lim[2];
  const float* q_row[2];
  float* out_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp_row0 + g + 8 * i;
    const bool valid = r < rows;
    const int t = r / a.group;
    const int head = kv_head * a.group + r % a.group;
    lim[i] = valid ? pos0 + t : -1;
    q_row[i] = valid ? a.q + t * a.q_stride + int64_t{head} * HD : nullptr;
    out_row[i] = valid ? a.out + t * a.out_stride + int64_t{head} * HD : nullptr;
  }

  // The first tile's copies go out before the q loads, whose latency they then hide.
  const __half* k_head = a.k + int64_t{kv_head} * HD;
  const __half* v_head = a.v + int64_t{kv_head} * HD;
  stage_kv_tile<HD>(smem, smem + kAttnStages * kTileHalves, k_head, v_head, a.kv_stride, 0, cta_kv_end);
  cp_async_commit();
  uint32_t qf[HD / 16][4];
  load_q_fragments<HD>(qf, q_row[0], q_row[1], a.q_scale);
  WarpRows<HD> st;
  st.init();
  for (int i = 0; i < n_tiles; ++i) {
    if (i + 1 < n_tiles) {
      const int next = (i + 1) % kAttnStages;
      stage_kv_tile<HD>(smem + next * kTileHalves, smem + (kAttnStages + next) * kTileHalves, k_head, v_head,
                        a.kv_stride, int64_t{i + 1} * kAttnTileKeys, cta_kv_end);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int64_t tile_start = int64_t{i} * kAttnTileKeys;
    if (warp_active && tile_start < warp_kv_end) {
      const int cur = i % kAttnStages;
      const bool need_mask = tile_start + kAttnTileKeys - 1 > warp_min_lim;
      warp_flash_step<HD, kAttnTileKeys>(st, qf, smem + cur * kTileHalves, smem + (kAttnStages + cur) * kTileHalves,
                                         tile_start, lim, need_mask);
    }
    __syncthreads();  // the stage is overwritten by the copy issued next iteration
  }

  reduce_row_sums<HD>(st);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (out_row[i] == nullptr) continue;
    const float inv = 1.0f / st.l[i];  // key 0 is visible to every row: l > 0
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      *reinterpret_cast<float2*>(out_row[i] + j * 8 + 2 * c) =
          make_float2(st.acc[j][2 * i] * inv, st.acc[j][2 * i + 1] * inv);
    }
  }
}

template <int HD>
cudaError_t launch_attention_prefill(const AttnArgs& a, cudaStream_t stream) {
  constexpr size_t smem = attn_smem_bytes<HD>();
  cudaError_t status = set_attention_smem(attention_prefill_kernel<HD>, smem);
  if (status != cudaSuccess) return status;
  const int64_t rows = int64_t{a.n_tokens} * a.group;
  const dim3 grid(static_cast<unsigned>((rows + kPrefillRows - 1) / kPrefillRows), static_cast<unsigned>(a.n_head_kv));
  attention_prefill_kernel<HD><<<grid, kAttnThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_attention_prefill<64>(const AttnArgs&, cudaStream_t);
template cudaError_t launch_attention_prefill<128>(const AttnArgs&, cudaStream_t);
template cudaError_t launch_attention_prefill<256>(const AttnArgs&, cudaStream_t);

}  // namespace ga::cuda::detail
