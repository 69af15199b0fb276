// The Hopper forward's kernel arguments (flash_fwd_sm90.cuh; filled by flash_forward.cu and flash_fp8.cu): a header
// of its own so the kernel pieces (the main loop, the epilogue: flash_fwd_epilogue.cuh) and the host share one
// definition. Zero-initialized fields mean "off" (no varlen, no paging, no split tail, the register epilogue).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ga::cuda::flash_detail {

// FwdArgs::win_left / win_right of an unbounded side: more keys than any sequence has (bounds stay in int).
inline constexpr int kNoWindow = 1 << 29;

struct FwdArgs {
  CUtensorMap tm_q;  // [batch][n_head][seqlen_q][HD] as 4-D boxes {64, kBlockM, 1, 1}
  CUtensorMap tm_k;  // [batch][n_head_kv][seqlen_k][HD], boxes {64, kBlockN, 1, 1}
  CUtensorMap tm_v;
  CUtensorMap tm_o;  // kSchedTmaStore (o_tma): [batch][n_head][seqlen_q][HD], boxes {64, kBlockM, 1, 1}
  void* o;
  float* lse;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
  int seqlen_q, seqlen_k, n_head, group, m_blocks, causal;
  int batch, total_tiles;  // tiles = m_blocks * n_head * batch
  // Causal tile order (decode_tile): sections of section_bh (batch, head) pairs, heaviest query blocks first within
  // a section; 0 or 1: one head at a time (FlashParams::causal_section_heads).
  int section_bh;
  float scale_log2;  // softmax_scale * log2(e) (FP8: times descale_q * descale_k); soft-capping: softcap * log2(e)
  float scale;       // softmax_scale (FP8: times descale_q * descale_k), for the LSE; soft-capping: softcap
  // Soft-capping (FlashParams::softcap): 0 = off; else 2 log2(e) softmax_scale / softcap (FP8: times the descales),
  // the factor that turns a raw q.k into attention_softcap.cuh's argument: the consumers replace S by
  // tanh(softmax_scale q.k / softcap), and scale / scale_log2 above carry the cap.
  float softcap_k2;
  // The keys a query row sees around its bottom-right diagonal key d: d - win_left .. d + win_right (FlashParams'
  // window; causal: win_right 0). An unbounded side is kNoWindow, so the bounds are plain sums (no branch on the
  // mode in the kernels) that never mask: set_fwd_problem.
  int win_left, win_right;
  int o_cols;        // columns of O to write: the head dim (96 on the 128 tiles; flash_forward.cu)
  float o_scale;     // FP8: descale_v, applied with 1 / l in the epilogue; 1 otherwise
  int out_bf16;      // FP8: output dtype bf16 (1) or fp16 (0); 16-bit inputs write their own dtype
  int out_f32;       // 16-bit inputs: o is f32 (FlashParams::o_f32)
  // Variable-length batches and paged KV (flash_attention.h): device arrays, null when unused.
  int varlen, paged;
  const int32_t* cu_q;     // [batch + 1]
  const int32_t* cu_k;     // [batch + 1] (packed keys)
  const int32_t* used_q;   // [batch] or null
  const int32_t* used_k;   // [batch] or null
  const int32_t* block_table;
  int64_t block_table_stride;
  int page_size, n_pages, kv_boxes, kv_box_rows;  // kv_boxes pages of kv_box_rows keys per key tile
  int total_q;             // varlen: rows of q and o
  int* tile_counter;  // FP8 persistent: tiles taken so far past the first gridDim.x (zero at launch)
  // Split tail (kSchedSplitTail, flash_fwd_split_tail.cuh): split_tail 0 = off (the kernel runs as its persistent
  // counterpart). full_rounds rounds of gridDim.x whole tiles, then tail_units key blocks of the tiles from
  // tail_first_tile on (kv_blocks per tile) cut evenly between the CTAs.
  int split_tail, full_rounds, tail_first_tile, tail_units, kv_blocks;
  float4* split_partials;  // [gridDim.x][split_slot_float4s(HD)]
  int* split_flags;        // [gridDim.x], zero at launch
  int o_tma;               // kSchedTmaStore: tm_o is set (the host runs such a kernel only then)
};

}  // namespace ga::cuda::flash_detail
