// A simple causal GQA attention for the shapes the tuned kernels (attention.h) do not take: any head_dim
// <= 256 (tiny test models: head_dim 8, 32), one block per (token, head), the query's scores in shared
// memory. Correctness, not speed: the engine takes it only where attention_unsupported_reason refuses.
//
// Pure entry point (DESIGN.md): device pointers, element strides, a params struct, the stream last; returns
// the launch status; simple_attention_unsupported_reason says in a sentence why parameters are refused.
// Layouts as kernels/attention.h. Two forms, as there:
//   * one sequence (block_table == null): query t sits at position *pos0 + t of a contiguous cache;
//   * many sequences over a paged pool (block_table set): the n_tokens queries are n_seqs runs,
//     run s = tokens [seq_q_start[s], seq_q_start[s + 1]) at positions seq_pos0[s] + i, position j
//     of run s in cache row block_table[s * block_table_stride + j / block_size] * block_size +
//     j % block_size.
// window_left and softcap as AttentionParams (attention.h): a query at position i sees positions
// max(0, i - window_left) .. i (window_left -1: 0 .. i); softcap > 0 replaces each scaled score s by
// softcap * tanh(s / softcap) before the softmax. The CPU reference is ga::cpu::attention / paged_attention.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ga::cuda {

struct SimpleAttentionParams {
  const float* q = nullptr;        // [n_tokens][n_head][head_dim], q_stride floats between tokens
  int64_t q_stride = 0;
  const __half* k = nullptr;       // [n_rows][n_head_kv][head_dim]
  const __half* v = nullptr;
  // or an FP8 cache (k, v null): E4M3 codes [n_rows][n_head_kv][head_dim] and scales [n_rows][n_head_kv]; a
  // cached value is e4m3(code) * scale, as attention.h's kFp8 form
  const uint8_t* k_fp8 = nullptr;
  const uint8_t* v_fp8 = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  float* out = nullptr;            // [n_tokens][n_head][head_dim], out_stride floats between tokens
  int64_t out_stride = 0;
  int n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  const int32_t* pos0 = nullptr;   // device scalar (one-sequence form)
  int64_t max_positions = 0;       // bound on any query's position + 1 (sizes the shared memory)
  float scale = 1.0f;
  int window_left = -1;            // -1: no sliding window; >= 0: keys at distance <= window_left before the query
  float softcap = 0.0f;            // 0: off; > 0: logits soft-capped at +-softcap
  // paged form (device arrays)
  int n_seqs = 0;
  const int32_t* seq_q_start = nullptr;  // [n_seqs + 1]
  const int32_t* seq_pos0 = nullptr;     // [n_seqs]
  const int32_t* block_table = nullptr;  // [n_seqs][block_table_stride]
  int block_table_stride = 0;
  int block_size = 0;
};
const char* simple_attention_unsupported_reason(const SimpleAttentionParams& p);
cudaError_t simple_attention(const SimpleAttentionParams& p, cudaStream_t stream);

}  // namespace ga::cuda
