// The CPU backend of the step op vocabulary (backends/step_ops.h): runs any architecture's Program on
// the host, float32 activations, over a paged KV pool (kv_pool.h). It is the reference every GPU
// forward is tested against, and the engine of the CPU Session and Scheduler.
//
// Layout: activations are row-major [n_tokens][cols] buffers grown once to the largest step seen, so
// every token of a batch, whatever its sequence, goes through each weight matrix in one cpu::matmul
// (the weights are read once per step: what makes prefill and multi-sequence decoding fast). Only
// attention looks at sequences. Steady-state decoding allocates nothing.
//
// Weights are the LoadedModel's views (no copy); 1-D parameters (norms, biases) are converted to float
// once at build time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backends/cpu/context_attention.h"
#include "backends/cpu/kv_pool.h"
#include "backends/step_ops.h"
#include "gpu_accel/model.h"

namespace ga {
class ThreadPool;
}
namespace ga::dist {
class Transport;
}

namespace ga::cpu {

// One step of a context-parallel rank (model/arch/context_parallel.h). The pool is the rank's shard of one
// sequence's cache, a pool of one block whose row i holds position kv_pos[i] (rows in arrival order, this
// step's included); the attention is context_attention.h's over the group. The step's rows may sit at any
// positions (a zigzag shard is two runs): every op but the attention is row by row.
struct ContextStep {
  dist::Transport* transport = nullptr;
  ContextAttention attention = ContextAttention::kRing;
  std::span<const int64_t> kv_rows;  // per batch entry: the pool row its K/V go to; -1: another rank keeps them
  std::span<const int64_t> kv_pos;   // [rows in use after the step]
};

class StepEngine {
 public:
  // Builds the factory's Program over the model's weights. max_positions bounds a sequence's positions
  // (the programs' RoPE choices may depend on it). A tensor-parallel shard (ModelConfig::shard) runs with its
  // group's transport, as its rank. The model, the pool and the transport must outlive the engine.
  StepEngine(const LoadedModel& model, const step::ProgramFactory& factory, ThreadPool* pool,
             int64_t max_positions, dist::Transport* transport = nullptr);
  ~StepEngine();
  StepEngine(StepEngine&&) noexcept;
  StepEngine& operator=(StepEngine&&) noexcept;

  // Evaluates the batch: every entry's K/V go to its (seq, pos) slot of `kv`, then each entry attends to
  // the positions of its sequence up to its own (earlier positions from previous calls or from this
  // batch). block_tables[s] lists sequence s's blocks in position order and must cover every position
  // used. Writes the logits of the entries with logits = true, in batch order, to `logits`
  // ([n_with_logits][n_vocab]). Checks token ids, sequences, positions, block ids and the pool's shape
  // before any work (InvalidArgument / OutOfRange), so a rejected batch changes nothing.
  void forward(std::span<const step::BatchToken> batch, std::span<const std::span<const int32_t>> block_tables,
               KvPool& kv, float* logits);

  // The batch as one step of a context-parallel rank (the entries' seq and block tables are unused). Every
  // rank of the step's transport calls it together. Refuses recurrent models (Unsupported: their state
  // cannot be sharded by position) and checks ids and rows before any work.
  void forward_context(std::span<const step::BatchToken> batch, const ContextStep& step, KvPool& kv, float* logits);

  const step::StateSpec& state() const;
  int64_t n_vocab() const;
  int64_t max_positions() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga::cpu
