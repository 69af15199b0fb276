// The attention of a context-parallel rank (model/arch/context_parallel.h): the sequence's positions are
// sharded over the ranks of a transport, each rank's KV pool holding the rows of its own positions, in the
// order they arrived (row i at position kv_pos[i]; not position order, so the paged attention, which reads a
// position's row from the block tables, cannot run over it).
//
// Two forms, both dist/ring_attention.h's (this file only gathers and scatters):
//   kRing   prefill: each rank's queries are its own new positions; the ranks' K/V blocks travel the ring
//           (ring_attention_forward), causal by the rows' explicit positions.
//   kPassQ  decode and short queries: every rank holds the same queries; each attends its shard and the
//           partials are merged by log-sum-exp (sharded_kv_attention), identical bytes on every rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gpu_accel/dtype.h"

namespace ga::dist {
class Transport;
}

namespace ga::cpu {

enum class ContextAttention { kRing, kPassQ };

struct ContextAttentionParams {
  dist::Transport* transport = nullptr;
  ContextAttention form = ContextAttention::kRing;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  int64_t window_left = -1;  // as step::AttentionOp
  float softcap = 0.0f;
  int64_t n_tokens = 0;
  const float* q = nullptr;            // [n_tokens][n_head][head_dim], rows q_stride floats apart
  int64_t q_stride = 0;
  std::span<const int64_t> q_pos;      // [n_tokens]
  DType kv_type = DType::F32;          // F32 or F16
  const void* k_rows = nullptr;        // [kv_pos.size()][n_head_kv][head_dim] of kv_type: the rank's shard
  const void* v_rows = nullptr;
  std::span<const int64_t> kv_pos;     // the shard rows' positions
  float* out = nullptr;                // [n_tokens][n_head][head_dim], rows out_stride floats apart
  int64_t out_stride = 0;
};

// Reused between calls (a float32 copy of an F16 shard, the gathered queries).
struct ContextAttentionScratch {
  std::vector<float> q, k, v;
};

// Every rank of the transport calls it together, once per attention layer of the step.
void context_attention(const ContextAttentionParams& p, ContextAttentionScratch& scratch);

}  // namespace ga::cpu
