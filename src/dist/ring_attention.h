// Ring attention (Liu et al., arXiv 2310.01889) on the host: the sequence is sharded over the ranks of a
// Transport, each rank keeps its queries and passes its K/V block around the ring; after world_size steps
// every query has met every key, and the partial results are merged exactly by their log-sum-exp. The
// backward sends dK/dV around the ring with their block and brings them home.
//
// This is the float32 reference of the algorithm (what the GPU ring, on the flash kernels, is checked
// against, and what CI runs on CPU ranks). Layouts: q, out, dq [n_q][n_head][head_dim]; k, v, dk, dv
// [n_kv][n_head_kv][head_dim]; lse [n_head][n_q] (natural log). Query head h reads KV head
// h / (n_head / n_head_kv). Each row carries its global position: with `causal` a query at position p sees
// the keys at positions <= p (one sequence, seqlen_q == seqlen_k); a query that sees no key gets out = 0 and
// lse = -inf. Only the K/V heads travel (GQA). Blocks may have different lengths on different ranks.
// The engine's attention variants are part of the shape, so a context-parallel forward runs every
// architecture's AttentionOp through this one copy of the math: a sliding window (a query at p also needs
// p - k <= window_left) and a soft-cap of the scores (Gemma 2: s = softcap * tanh(s / softcap)).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dist/transport.h"

namespace ga::dist {

struct AttentionShape {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  bool causal = false;
  int64_t window_left = -1;  // >= 0: keys at positions p - window_left .. only (backends/cpu/ops.h's meaning)
  float softcap = 0.0f;      // > 0: scores capped before the softmax (forward and pass-Q only)
};

// One rank's shard: its rows and their global positions.
struct AttentionShard {
  std::span<const int64_t> q_pos;  // [n_q]
  std::span<const float> q;
  std::span<const int64_t> kv_pos;  // [n_kv]
  std::span<const float> k, v;
};

struct AttentionForward {
  std::vector<float> out;  // [n_q][n_head][head_dim]
  std::vector<float> lse;  // [n_head][n_q]
};

struct AttentionGrads {
  std::vector<float> dq, dk, dv;
};

// Every rank of the transport calls these together with its shard.
AttentionForward ring_attention_forward(Transport& t, const AttentionShape& s, const AttentionShard& shard);
AttentionGrads ring_attention_backward(Transport& t, const AttentionShape& s, const AttentionShard& shard,
                                       std::span<const float> out, std::span<const float> lse,
                                       std::span<const float> dout);

// Pass-Q attention for decode and short queries over a long sharded cache: every rank holds the same queries
// (shard.q, q_pos) and its own part of the K/V; each attends over its part, the partial results (out, lse)
// travel the ring and every rank merges them all by LSE, in rank order, so all ranks return the same bytes.
AttentionForward sharded_kv_attention(Transport& t, const AttentionShape& s, const AttentionShard& shard);

// Load-balanced causal sharding: the positions [0, n) in 2 * world_size chunks (sizes differing by at most
// one), rank r holding chunks r and 2 * world_size - 1 - r, so every rank does about the same causal work.
std::vector<int64_t> zigzag_positions(int64_t n, int world_size, int rank);
// Contiguous sharding: rank r holds the r-th of world_size nearly equal ranges.
std::vector<int64_t> contiguous_positions(int64_t n, int world_size, int rank);

}  // namespace ga::dist
