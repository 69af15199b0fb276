// The CPU forward of any registered architecture: its Program (architecture.h) on the CPU step engine
// (backends/cpu/step_engine.h), over a paged KV pool (BatchForward, the Scheduler's CPU engine) or over a
// private pool of one block that holds one sequence's whole context (SequenceForward, the Session's CPU
// engine). One code path: the Session's numbers are by construction the scheduler's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backends/cpu/kv_pool.h"
#include "backends/cpu/step_engine.h"
#include "backends/step_ops.h"
#include "gpu_accel/model.h"

namespace ga {
class ThreadPool;
}
namespace ga::dist {
class Transport;
}

namespace ga::arch {

using step::BatchToken;

// The model's Program on the CPU. Not thread-safe; the model and the thread pool must outlive it.
class BatchForward {
 public:
  // max_positions: the context one sequence may reach (RoPE choices may depend on it); 0: the model's
  // training context. A tensor-parallel shard (tensor_parallel.h) runs with its group's transport.
  BatchForward(const LoadedModel& model, ThreadPool* pool, int64_t max_positions = 0,
               dist::Transport* transport = nullptr);
  ~BatchForward();
  BatchForward(BatchForward&&) noexcept;
  BatchForward& operator=(BatchForward&&) noexcept;

  // cpu::StepEngine::forward's contract.
  void forward(std::span<const BatchToken> batch, std::span<const std::span<const int32_t>> block_tables,
               cpu::KvPool& kv, float* logits);
  // cpu::StepEngine::forward_context's: one step of a context-parallel rank (context_parallel.h).
  void forward_context(std::span<const BatchToken> batch, const cpu::ContextStep& step, cpu::KvPool& kv,
                       float* logits);
  const step::StateSpec& state() const;
  const ModelConfig& config() const;
  int64_t n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct SequenceParams {
  int64_t n_ctx = 0;           // positions the KV cache holds
  DType kv_type = DType::F32;  // F32, F16 or F8_E4M3 (the FP8 cache; not with context_parallel > 1)
  int64_t max_batch = 512;     // tokens per internal step; longer evals are split (bounds scratch memory)
  dist::Transport* transport = nullptr;  // a tensor-parallel shard's group (every rank evaluates the same tokens)
  // > 1: the model split over this many CPU ranks of this process (tensor_parallel.h, the loopback transport),
  // each on its share of the pool's threads; the logits equal the unsplit model's.
  int tensor_parallel = 1;
  // > 1: the sequence's positions sharded over this many CPU ranks of this process (context_parallel.h): the
  // prefill by ring attention, decode by the pass-Q merge over the sharded cache; the logits equal the
  // one-rank forward's. Not with tensor_parallel > 1; refused for recurrent models.
  int context_parallel = 1;
};

// One sequence over a loaded model. Not thread-safe; the model and the pool must outlive it.
class SequenceForward {
 public:
  SequenceForward(const LoadedModel& model, const SequenceParams& params, ThreadPool* pool);
  ~SequenceForward();
  SequenceForward(SequenceForward&&) noexcept;
  SequenceForward& operator=(SequenceForward&&) noexcept;

  // Evaluates tokens at positions pos0 .. pos0 + n - 1 (the cache must hold positions < pos0).
  // Writes the last token's logits ([n_vocab]) or, with all_logits, every token's ([n][n_vocab]) to
  // `logits`. Validates ids (InvalidArgument) and the context (OutOfRange) before any work.
  void eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits);

  int64_t n_ctx() const;
  int64_t n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga::arch
