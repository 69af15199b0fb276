// The CPU forward of any architecture (see forward.h).
//
// The single-sequence engine is the multi-sequence one with a private KV pool of one block that holds the
// whole context and a block table {0}. Long evals are cut into steps of max_batch tokens, which bounds the
// activation scratch for long prompts; only the last step (or every step, with all_logits) asks for logits.
#include "model/arch/forward.h"

#include "core/thread_pool.h"
#include "dist/loopback.h"
#include "model/arch/context_parallel.h"
#include "model/arch/tensor_parallel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "gpu_accel/error.h"
#include "model/arch/architecture.h"

namespace ga::arch {
namespace {

constexpr int64_t kMaxContext = int64_t{1} << 24;  // keeps every cache size computation far from overflow

cpu::KvPoolParams single_block_pool(const SequenceParams& params) {
  GA_CHECK(params.n_ctx > 0 && params.n_ctx <= kMaxContext, InvalidArgument, "context length ", params.n_ctx,
           " is outside [1, ", kMaxContext, "]");
  GA_CHECK(cpu::cpu_kv_type_supported(params.kv_type), InvalidArgument, "KV cache type ",
           dtype_name(params.kv_type), " (supported: F32, F16, F8_E4M3)");
  GA_CHECK(params.max_batch > 0, InvalidArgument, "max_batch must be positive");
  cpu::KvPoolParams p;
  p.n_blocks = 1;
  p.block_size = params.n_ctx;
  p.kv_type = params.kv_type;
  return p;
}

}  // namespace

struct BatchForward::Impl {
  const LoadedModel* model;
  std::unique_ptr<step::ProgramFactory> factory;
  cpu::StepEngine engine;
  Impl(const LoadedModel& m, ThreadPool* pool, int64_t max_positions, dist::Transport* transport)
      : model(&m),
        factory(make_program_factory(m)),
        engine(m, *factory, pool, max_positions > 0 ? max_positions : std::max<int64_t>(m.config.n_ctx_train, 1),
               transport) {}
};

BatchForward::BatchForward(const LoadedModel& model, ThreadPool* pool, int64_t max_positions,
                           dist::Transport* transport)
    : impl_(std::make_unique<Impl>(model, pool, max_positions, transport)) {}
BatchForward::~BatchForward() = default;
BatchForward::BatchForward(BatchForward&&) noexcept = default;
BatchForward& BatchForward::operator=(BatchForward&&) noexcept = default;

void BatchForward::forward_context(std::span<const BatchToken> batch, const cpu::ContextStep& step, cpu::KvPool& kv,
                                   float* logits) {
  impl_->engine.forward_context(batch, step, kv, logits);
}

void BatchForward::forward(std::span<const BatchToken> batch, std::span<const std::span<const int32_t>> block_tables,
                           cpu::KvPool& kv, float* logits) {
  impl_->engine.forward(batch, block_tables, kv, logits);
}
const step::StateSpec& BatchForward::state() const { return impl_->engine.state(); }
const ModelConfig& BatchForward::config() const { return impl_->model->config; }
int64_t BatchForward::n_vocab() const { return impl_->engine.n_vocab(); }

struct SequenceForward::Impl {
  SequenceParams params;
  std::unique_ptr<BatchForward> forward;
  std::unique_ptr<cpu::KvPool> kv;
  std::vector<BatchToken> batch;  // reused: decoding allocates nothing
  static constexpr int32_t kTable[1] = {0};
  // tensor_parallel > 1: one shard, thread pool and SequenceForward per rank, and the group they sum through
  std::vector<LoadedModel> shards;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::unique_ptr<dist::LoopbackGroup> group;
  std::vector<std::unique_ptr<SequenceForward>> ranks;
  std::vector<std::vector<float>> rank_logits;  // ranks 1..: their (identical) logits, not returned
  std::unique_ptr<ContextParallelSequence> context;  // context_parallel > 1

  Impl(const LoadedModel& model, const SequenceParams& p, ThreadPool* pool) : params(p) {
    GA_CHECK(p.tensor_parallel >= 1, InvalidArgument, "tensor_parallel must be >= 1, got ", p.tensor_parallel);
    GA_CHECK(p.context_parallel >= 1, InvalidArgument, "context_parallel must be >= 1, got ", p.context_parallel);
    if (p.context_parallel > 1) {
      context = std::make_unique<ContextParallelSequence>(model, p, pool);
      return;
    }
    if (p.tensor_parallel == 1) {
      forward = std::make_unique<BatchForward>(model, pool, p.n_ctx, p.transport);
      kv = std::make_unique<cpu::KvPool>(forward->state(), single_block_pool(p));
      return;
    }
    const int world = p.tensor_parallel;
    group = std::make_unique<dist::LoopbackGroup>(world);
    rank_logits.resize(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) shards.push_back(shard_for_tensor_parallel(model, world, r));
    const int threads = pool != nullptr ? std::max(1, pool->size() / world) : 1;
    for (int r = 0; r < world; ++r) {
      pools.push_back(std::make_unique<ThreadPool>(threads));
      SequenceParams rp = p;
      rp.tensor_parallel = 1;
      rp.transport = &group->transport(r);
      ranks.push_back(std::make_unique<SequenceForward>(shards[static_cast<size_t>(r)], rp, pools.back().get()));
    }
  }
};

SequenceForward::SequenceForward(const LoadedModel& model, const SequenceParams& params, ThreadPool* pool)
    : impl_(std::make_unique<Impl>(model, params, pool)) {}
SequenceForward::~SequenceForward() = default;
SequenceForward::SequenceForward(SequenceForward&&) noexcept = default;
SequenceForward& SequenceForward::operator=(SequenceForward&&) noexcept = default;

int64_t SequenceForward::n_ctx() const { return impl_->params.n_ctx; }
int64_t SequenceForward::n_vocab() const {
  if (impl_->context) return impl_->context->n_vocab();
  return impl_->forward ? impl_->forward->n_vocab() : impl_->ranks[0]->n_vocab();
}

void SequenceForward::eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) {
  Impl& m = *impl_;
  if (m.context) {
    m.context->eval(tokens, pos0, all_logits, logits);
    return;
  }
  if (!m.ranks.empty()) {  // every rank evaluates the tokens on its shard; rank 0's logits are returned
    const size_t rows = all_logits ? tokens.size() : 1;
    m.group->run([&](dist::Transport& t) {
      const size_t r = static_cast<size_t>(t.rank());
      float* out = logits;
      if (r > 0) {
        m.rank_logits[r].resize(rows * static_cast<size_t>(n_vocab()));
        out = m.rank_logits[r].data();
      }
      m.ranks[r]->eval(tokens, pos0, all_logits, out);
    });
    return;
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = m.forward->n_vocab();
  GA_CHECK(n > 0, InvalidArgument, "eval needs at least one token");
  GA_CHECK(pos0 >= 0 && pos0 + n <= m.params.n_ctx, OutOfRange, "context overflow: ", pos0, " positions used + ", n,
           " new tokens > n_ctx ", m.params.n_ctx);
  for (int64_t i = 0; i < n; ++i) {  // all ids before any step, so a bad id changes nothing
    const int32_t id = tokens[static_cast<size_t>(i)];
    GA_CHECK(id >= 0 && id < n_vocab, InvalidArgument, "token id ", id, " at index ", i,
             " is outside the vocabulary [0, ", n_vocab, ")");
  }
  const std::span<const int32_t> table(Impl::kTable, 1);
  const std::span<const std::span<const int32_t>> tables(&table, 1);
  for (int64_t done = 0; done < n;) {
    const int64_t step_n = std::min(m.params.max_batch, n - done);
    const bool last_step = done + step_n == n;
    m.batch.resize(static_cast<size_t>(step_n));
    for (int64_t t = 0; t < step_n; ++t) {
      BatchToken& e = m.batch[static_cast<size_t>(t)];
      e.token = tokens[static_cast<size_t>(done + t)];
      e.pos = pos0 + done + t;
      e.seq = 0;
      e.logits = all_logits || (last_step && t == step_n - 1);
    }
    float* step_logits = all_logits ? logits + done * n_vocab : logits;
    m.forward->forward(m.batch, tables, *m.kv, step_logits);
    done += step_n;
  }
}

}  // namespace ga::arch
