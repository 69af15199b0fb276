// Context parallelism for one sequence on CPU ranks of this process (the loopback transport): every rank holds
// the whole model and a shard of the sequence's KV cache, by position.
//
// Prefill: a chunk of new tokens is sharded zigzag over the M ranks (dist::zigzag_positions: share s holds
// chunks s and 2M - 1 - s of 2M, so under the causal mask every share's queries meet about as many keys and
// no rank waits on another at a ring step; contiguous shards would leave the last rank ~2x the average
// work). The shares differ by a token or two: the largest go to the least-filled ranks. Each rank runs its tokens through the model; the attention is ring attention over the ranks' shards,
// and each token's K/V stay with the rank that evaluated it.
// Decode and chunks too short to give every rank a token: every rank evaluates the same tokens and attends
// its own shard, the partials merged by log-sum-exp (pass-Q); each new token's K/V go to the least-filled
// shard (lowest rank on ties), which turns round-robin over a long generation and keeps every shard within a
// row or two of n_ctx / M.
//
// The Programs are the architectures' own: only the CPU step engine's attention differs
// (backends/cpu/context_attention.h). Recurrent models are refused: a recurrent state is not a function of
// positions that could be split.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/cpu/context_attention.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"

namespace ga {
class ThreadPool;
}

namespace ga::arch {

// How one chunk of n new tokens spreads over the ranks, given how many cache rows each holds.
struct ChunkPlan {
  cpu::ContextAttention attention = cpu::ContextAttention::kRing;
  std::vector<std::vector<int64_t>> tokens;  // per rank: the chunk's token indices it evaluates, in order
  std::vector<int> keeper;                   // per token: the rank whose shard keeps its K/V
};
ChunkPlan plan_chunk(int64_t n, std::span<const int64_t> rows_held);

class ContextParallelSequence {
 public:
  // params.context_parallel ranks, each on its share of the pool's threads. Throws Unsupported for a recurrent
  // model or a tensor-parallel shard, InvalidArgument for a bad rank count.
  ContextParallelSequence(const LoadedModel& model, const SequenceParams& params, ThreadPool* pool);
  ~ContextParallelSequence();
  ContextParallelSequence(const ContextParallelSequence&) = delete;
  ContextParallelSequence& operator=(const ContextParallelSequence&) = delete;

  // SequenceForward::eval's contract. pos0 below the positions held drops the later ones (every shard's tail).
  void eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits);
  int64_t n_vocab() const;
  // The cache rows each rank holds.
  std::vector<int64_t> rows_held() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga::arch
