#include "model/arch/context_parallel.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/kv_pool.h"
#include "core/thread_pool.h"
#include "dist/loopback.h"
#include "dist/ring_attention.h"
#include "gpu_accel/error.h"

namespace ga::arch {

ChunkPlan plan_chunk(int64_t n, std::span<const int64_t> rows_held) {
  const int world = static_cast<int>(rows_held.size());
  GA_CHECK(world >= 1 && n >= 1, Internal, "a chunk of ", n, " tokens over ", world, " ranks");
  ChunkPlan plan;
  plan.tokens.resize(static_cast<size_t>(world));
  plan.keeper.assign(static_cast<size_t>(n), 0);
  // The zigzag shares (each about the same causal work) differ by a token or two; the largest go to the
  // least-filled ranks, so that many short prompts do not pile their extra rows onto one shard.
  std::vector<std::vector<int64_t>> shares;
  bool every_rank = true;
  for (int s = 0; s < world; ++s) {
    shares.push_back(dist::zigzag_positions(n, world, s));
    every_rank = every_rank && !shares.back().empty();
  }
  std::vector<int> by_rows(static_cast<size_t>(world)), by_size(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) by_rows[static_cast<size_t>(r)] = by_size[static_cast<size_t>(r)] = r;
  std::stable_sort(by_rows.begin(), by_rows.end(),
                   [&](int a, int b) { return rows_held[static_cast<size_t>(a)] < rows_held[static_cast<size_t>(b)]; });
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int a, int b) { return shares[static_cast<size_t>(a)].size() > shares[static_cast<size_t>(b)].size(); });
  for (int i = 0; i < world; ++i) {
    plan.tokens[static_cast<size_t>(by_rows[static_cast<size_t>(i)])] = shares[static_cast<size_t>(by_size[static_cast<size_t>(i)])];
  }
  if (every_rank) {  // the ring: each token stays where it was evaluated
    for (int r = 0; r < world; ++r) {
      for (const int64_t i : plan.tokens[static_cast<size_t>(r)]) plan.keeper[static_cast<size_t>(i)] = r;
    }
    return plan;
  }
  plan.attention = cpu::ContextAttention::kPassQ;
  std::vector<int64_t> held(rows_held.begin(), rows_held.end());
  for (int64_t i = 0; i < n; ++i) {
    const int r = static_cast<int>(std::min_element(held.begin(), held.end()) - held.begin());
    plan.keeper[static_cast<size_t>(i)] = r;
    ++held[static_cast<size_t>(r)];
  }
  for (auto& t : plan.tokens) {
    t.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = i;
  }
  return plan;
}

namespace {

constexpr int64_t kMaxContext = int64_t{1} << 24;

// One rank: the whole model, its own threads and its shard of the cache.
struct Rank {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<BatchForward> forward;
  std::unique_ptr<cpu::KvPool> kv;  // one block; row i holds position kv_pos[i]
  std::vector<int64_t> kv_pos;
  // the current chunk's step
  std::vector<BatchToken> batch;
  std::vector<int64_t> kv_rows;
  std::vector<int64_t> logit_tokens;  // the chunk's tokens whose logits this rank writes, in batch order
  std::vector<float> logits;
};

// A pool of one block of `capacity` rows holding the first `rows` rows of `old` (when given).
std::unique_ptr<cpu::KvPool> shard_pool(const step::StateSpec& state, DType type, int64_t capacity,
                                        cpu::KvPool* old, int64_t rows) {
  cpu::KvPoolParams p;
  p.n_blocks = 1;
  p.block_size = capacity;
  p.kv_type = type;
  auto pool = std::make_unique<cpu::KvPool>(state, p);
  if (old != nullptr) {
    const size_t elem = type == DType::F16 ? 2 : 4;
    for (int64_t l = 0; l < old->n_layers(); ++l) {
      const size_t bytes = static_cast<size_t>(rows * old->kv_dim(l)) * elem;
      if (bytes == 0) continue;
      std::memcpy(pool->k(l), old->k(l), bytes);
      std::memcpy(pool->v(l), old->v(l), bytes);
    }
  }
  return pool;
}

}  // namespace

struct ContextParallelSequence::Impl {
  SequenceParams params;
  int world = 1;
  std::unique_ptr<dist::LoopbackGroup> group;
  std::vector<Rank> ranks;

  // Makes room for `rows` rows on rank r (rare: the plan keeps the shards balanced; a long mix of uneven
  // prompts can still tip one over its initial n_ctx / M + slack).
  void reserve(Rank& rank, int64_t rows) {
    const int64_t cap = rank.kv->block_size();
    if (rows <= cap) return;
    const int64_t grown = std::min(std::max(rows, cap + cap / 2), params.n_ctx);
    rank.kv = shard_pool(rank.forward->state(), params.kv_type, grown, rank.kv.get(),
                         static_cast<int64_t>(rank.kv_pos.size()));
  }

  // Runs one chunk (tokens [c0, c0 + n) of the eval at positions pos0 + c0 ..) on every rank.
  void run_chunk(std::span<const int32_t> tokens, int64_t pos0, int64_t c0, int64_t n, bool all_logits,
                 bool last_chunk, float* logits) {
    std::vector<int64_t> held;
    for (const Rank& r : ranks) held.push_back(static_cast<int64_t>(r.kv_pos.size()));
    const ChunkPlan plan = plan_chunk(n, held);
    const bool pass_q = plan.attention == cpu::ContextAttention::kPassQ;
    const int64_t V = n_vocab();
    const auto wants_logits = [&](int64_t i) { return all_logits || (last_chunk && i == n - 1); };
    for (int r = 0; r < world; ++r) {
      Rank& rank = ranks[static_cast<size_t>(r)];
      rank.batch.clear();
      rank.kv_rows.clear();
      rank.logit_tokens.clear();
      int64_t kept = 0;
      for (const int64_t i : plan.tokens[static_cast<size_t>(r)]) kept += plan.keeper[static_cast<size_t>(i)] == r;
      reserve(rank, held[static_cast<size_t>(r)] + kept);
      for (const int64_t i : plan.tokens[static_cast<size_t>(r)]) {
        BatchToken e;
        e.token = tokens[static_cast<size_t>(c0 + i)];
        e.pos = pos0 + c0 + i;
        // pass-Q: every rank computes the same logits; rank 0's are returned
        e.logits = wants_logits(i) && (!pass_q || r == 0);
        if (e.logits) rank.logit_tokens.push_back(i);
        if (plan.keeper[static_cast<size_t>(i)] == r) {
          rank.kv_rows.push_back(static_cast<int64_t>(rank.kv_pos.size()));
          rank.kv_pos.push_back(e.pos);
        } else {
          rank.kv_rows.push_back(-1);
        }
        rank.batch.push_back(e);
      }
      rank.logits.resize(rank.logit_tokens.size() * static_cast<size_t>(V));
    }
    try {
      group->run([&](dist::Transport& t) {
        Rank& rank = ranks[static_cast<size_t>(t.rank())];
        cpu::ContextStep step;
        step.transport = &t;
        step.attention = plan.attention;
        step.kv_rows = rank.kv_rows;
        step.kv_pos = rank.kv_pos;
        rank.forward->forward_context(rank.batch, step, *rank.kv, rank.logits.data());
      });
    } catch (...) {  // the chunk's rows were not (all) written: the shards go back to what they held
      for (int r = 0; r < world; ++r) ranks[static_cast<size_t>(r)].kv_pos.resize(static_cast<size_t>(held[static_cast<size_t>(r)]));
      throw;
    }
    for (const Rank& rank : ranks) {
      for (size_t j = 0; j < rank.logit_tokens.size(); ++j) {
        const int64_t row = all_logits ? c0 + rank.logit_tokens[j] : 0;
        std::copy_n(rank.logits.data() + j * static_cast<size_t>(V), V, logits + row * V);
      }
    }
  }

  int64_t n_vocab() const { return ranks[0].forward->n_vocab(); }
};

ContextParallelSequence::ContextParallelSequence(const LoadedModel& model, const SequenceParams& params,
                                                 ThreadPool* pool)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.params = params;
  m.world = params.context_parallel;
  GA_CHECK(m.world >= 2, InvalidArgument, "context parallelism needs at least 2 ranks, got ", m.world);
  GA_CHECK(params.tensor_parallel == 1 && model.config.shard.world == 1 && params.transport == nullptr,
           Unsupported, "context parallelism together with tensor parallelism is not built yet (tensor_parallel ",
           params.tensor_parallel, ", context_parallel ", m.world, "): use one of them");
  GA_CHECK(params.n_ctx > 0 && params.n_ctx <= kMaxContext, InvalidArgument, "context length ", params.n_ctx,
           " is outside [1, ", kMaxContext, "]");
  GA_CHECK(params.kv_type == DType::F32 || params.kv_type == DType::F16, InvalidArgument, "KV cache type ",
           dtype_name(params.kv_type), " with context parallelism (its shards are F32 or F16; the FP8 cache runs ",
           "without --context-parallel)");
  GA_CHECK(params.max_batch > 0, InvalidArgument, "max_batch must be positive");
  m.group = std::make_unique<dist::LoopbackGroup>(m.world);
  const int threads = pool != nullptr ? std::max(1, pool->size() / m.world) : 1;
  // each shard starts with its share of the context and a little slack for uneven chunks
  const int64_t capacity = std::min(params.n_ctx, (params.n_ctx + m.world - 1) / m.world + m.world);
  m.ranks.resize(static_cast<size_t>(m.world));
  for (Rank& rank : m.ranks) {
    rank.pool = std::make_unique<ThreadPool>(threads);
    rank.forward = std::make_unique<BatchForward>(model, rank.pool.get(), params.n_ctx);
    GA_CHECK(rank.forward->state().recurrent.empty(), Unsupported,
             "context parallelism shards the KV cache by position; architecture ", model.config.arch,
             " keeps a recurrent state, which cannot be sharded by position");
    rank.kv = shard_pool(rank.forward->state(), params.kv_type, capacity, nullptr, 0);
  }
}

ContextParallelSequence::~ContextParallelSequence() = default;

int64_t ContextParallelSequence::n_vocab() const { return impl_->n_vocab(); }

std::vector<int64_t> ContextParallelSequence::rows_held() const {
  std::vector<int64_t> out;
  for (const Rank& r : impl_->ranks) out.push_back(static_cast<int64_t>(r.kv_pos.size()));
  return out;
}

void ContextParallelSequence::eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) {
  Impl& m = *impl_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t V = n_vocab();
  GA_CHECK(n > 0, InvalidArgument, "eval needs at least one token");
  GA_CHECK(pos0 >= 0 && pos0 + n <= m.params.n_ctx, OutOfRange, "context overflow: ", pos0, " positions used + ", n,
           " new tokens > n_ctx ", m.params.n_ctx);
  int64_t held = 0;
  for (const Rank& r : m.ranks) held += static_cast<int64_t>(r.kv_pos.size());
  GA_CHECK(pos0 <= held, InvalidArgument, "eval at position ", pos0, " but the cache holds only positions < ", held);
  for (int64_t i = 0; i < n; ++i) {  // all ids before any step, so a bad id changes nothing
    const int32_t id = tokens[static_cast<size_t>(i)];
    GA_CHECK(id >= 0 && id < V, InvalidArgument, "token id ", id, " at index ", i, " is outside the vocabulary [0, ",
             V, ")");
  }
  // positions from pos0 on are replaced: rows arrive in position order, so they are every shard's tail
  for (Rank& r : m.ranks) {
    while (!r.kv_pos.empty() && r.kv_pos.back() >= pos0) r.kv_pos.pop_back();
  }
  // each rank's step stays within max_batch tokens (the activation scratch), as the one-rank forward's does
  const int64_t chunk = m.params.max_batch * m.world;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t len = std::min(chunk, n - c0);
    m.run_chunk(tokens, pos0, c0, len, all_logits, c0 + len == n, logits);
  }
}

}  // namespace ga::arch
