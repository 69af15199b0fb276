// Continuous batching over a paged KV cache (see gpu_accel/scheduler.h).
//
// Threads: submit()/cancel()/stats() run on callers' threads and only touch the queue, the cancel
// set and the stats snapshot, under one mutex. Everything else (running sequences, the block
// manager, the KV pool, the forward pass) belongs to the scheduler thread, which never holds the
// mutex while it computes or calls back, so a callback may call submit(), cancel() or stats().
// The one exception is sampling: the token choice of every sequence that samples in a step runs in
// parallel on the thread pool (sample_step; each task touches only its own sequence's sampler and
// reads the shared logits), then events are delivered in order on the scheduler thread.
//
// Waiting for work: the thread sleeps on `wake` while nothing is queued or running. A lone request's
// submit would then pay the thread's wake-up (a futex call, an interrupt to a halted CPU: tens of
// microseconds to ~0.1 ms on a VM) before its prefill starts. expect_request() (the HTTP server calls it
// when a completion's request head arrives) wakes the thread early and opens a busy-wait window of
// poll_us: the thread watches `signals` (bumped by submit, cancel and stop) instead of sleeping, so its
// wake-up overlaps the request's body read, JSON parsing and tokenization, and the submit finds it
// running. The window is bounded and only opened by arriving requests: an idle server never spins.
//
// Device: the step's forward pass is an engine::BatchBackend (batch_backend.h), the CPU reference or
// the CUDA forward over a device KV pool, chosen once from options.device. The one place that looks
// at it is sampling: a backend that samples on the device (CUDA, gpu_sampling) keeps the step's
// logits there and chooses every row's token with one sample_rows_on_gpu call
// (sample_step_on_device: the same tokens, PRNG states and logprob figures); else the host rows
// are sampled on the pool (sample_step).
//
// One sequence = its tokens (prompt + generated so far), how many of them have K/V in its blocks
// (n_computed), its block table, its Sampler and its TextStreamer. Prefill and decode are the same
// thing: each step feeds tokens[n_computed ..] (a chunk for a prompt, one token when decoding) and,
// when that reaches the last token, samples the next one from its logits. So a sequence that was
// preempted (blocks taken back) simply re-prefills prompt + generated tokens later and continues
// with the same sampler state: its output does not change.
//
// Policy (admission, growth, preemption):
// - Admission (FIFO; preempted sequences first): a request is admitted while fewer than max_running
//   run and the free + evictable blocks cover its whole prompt (after prefix-cache hits) plus one
//   block of headroom per running sequence. With nothing running it is always admitted (submit()
//   rejected prompts larger than the pool), so the queue cannot stall.
// - Growth: blocks are taken on demand, one block at a time, as positions are filled. If none is
//   left, the most recently admitted other sequence that is not in this step's batch is preempted
//   (vLLM's recompute preemption: its blocks are released and it goes back to the front of the
//   queue). If there is none, the sequence preempts itself, unless it is the only one running: a
//   sequence that cannot grow in an otherwise empty pool finishes with Length (never a deadlock).
// - Batch: decode tokens first (one per sequence), then prompt chunks, up to max_batch_tokens.
// - Prefix cache: full prompt blocks are published once their K/V is written; a new sequence reuses
//   the longest cached chain of its prompt's full blocks, except that the last prompt token is always
//   computed (its logits are needed).
#include "gpu_accel/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "core/env.h"
#include "core/log.h"
#include "core/spin_wait.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "model/arch/forward.h"
#include "runtime/engine/batch_backend.h"
#include "runtime/engine/generate_stream.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/engine/prompt_state_cache.h"
#include "runtime/engine/raw_logprobs.h"

namespace ga {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxTopLogprobs = 20;          // OpenAI's limit
constexpr double kRateWindowSeconds = 10.0;  // tok/s are averaged over this recent window

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Sequence {
  uint64_t id = 0;
  CompletionRequest req;
  Scheduler::TokenCallback on_token;
  Scheduler::DoneCallback on_done;
  Sampler sampler;
  detail::TextStreamer streamer;
  bool strip_space = false;  // the first piece's dummy-prefix space (see generate.cpp)

  std::vector<int32_t> tokens;  // prompt + generated: what the K/V will hold, and the sampler's history
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // positions whose K/V is in `blocks`
  std::vector<int32_t> blocks;  // block table
  uint64_t chain_key = engine::KvBlockManager::kRootKey;  // prefix-cache key of block n_published - 1
  int64_t n_published = 0;                                // leading full prompt blocks in the cache
  // Recurrent models: the position after which the state is kept in the prompt-state cache (n_prompt - 1
  // when that prefix is not there yet, else 0), and whether the cache was asked since the last (re)start.
  int64_t save_state_at = 0;
  bool state_looked_up = false;

  Clock::time_point submitted;
  bool scheduled_once = false;
  bool produced_token = false;
  CompletionResult result;

  // This step only.
  int64_t step_tokens = 0;  // tokens fed in this step's batch (0: not in it)
  int64_t logits_row = -1;  // row of this step's logits, when it samples
  bool leaving = false;     // finished or preempted during this step
  bool done = false;        // finished: on_done was called
  // The token sample_step chose (or the error it threw), with its logprobs when requested.
  int32_t chosen = -1;
  std::exception_ptr sample_error;
  TokenLogprob chosen_logprob;
  std::vector<TokenLogprob> top_logprobs;

  Sequence(CompletionRequest r, std::vector<std::string> stop)
      : req(std::move(r)), sampler(req.sampling), streamer(std::move(stop)) {}
};

using SeqPtr = std::unique_ptr<Sequence>;

struct RateSample {
  Clock::time_point t;
  uint64_t prompt_tokens;
  uint64_t generated_tokens;
};


}  // namespace

struct Scheduler::Impl {
  const LoadedModel& model;
  const Tokenizer& tokenizer;
  SchedulerOptions opt;
  int64_t n_ctx = 0;
  Clock::time_point started = Clock::now();

  ThreadPool pool;
  std::unique_ptr<engine::BatchBackend> backend;
  engine::KvBlockManager blocks;
  engine::PromptStateCache prompt_states;

  // Shared with callers' threads, under `mu`.
  mutable std::mutex mu;
  std::condition_variable wake;
  std::deque<SeqPtr> waiting;
  std::unordered_set<uint64_t> cancel_requests;
  bool stop = false;
  uint64_t next_id = 1;
  Clock::time_point poll_until{};  // end of the busy-wait window expect_request() opened
  // Bumped (after the change, under mu) by everything a waiting loop must see: submit, cancel, stop;
  // a busy-waiting loop watches it instead of the mutex.
  std::atomic<uint64_t> signals{0};
  Clock::time_point woken_at{};  // scheduler thread: when wait_for_work() last returned (GA_SCHEDULER_TRACE)
  Clock::time_point chosen_at{};  // scheduler thread: when the last step's tokens were chosen, before emission
  SchedulerStats snapshot;  // refreshed after every step
  // What idle() reads without the mutex: requests submitted and not finished, and the end (steady-clock
  // nanoseconds) of the window that expect_request() opened. idle_changed is notified when `active` drops
  // to 0 (wait_until_idle sleeps on it).
  std::atomic<int64_t> active{0};
  std::atomic<int64_t> announced_until_ns{0};
  mutable std::condition_variable idle_changed;
  std::deque<std::function<void()>> tasks;  // housekeep()'s, run by the scheduler thread between steps
  std::deque<RateSample> window;

  // Scheduler thread only.
  std::vector<SeqPtr> running;  // admission order
  std::deque<SeqPtr> preempted;
  std::vector<Sequence*> step_seqs;
  std::vector<arch::BatchToken> batch;
  std::vector<std::span<const int32_t>> tables;
  std::vector<Sequence*> sampling;  // this step's sequences that sample
  uint64_t step_prompt_tokens = 0, step_generated_tokens = 0;
  uint64_t steps = 0;
  double step_seconds = 0, forward_seconds = 0, sample_seconds = 0;
  uint64_t finished = 0, cancelled = 0, preemptions = 0;
  std::thread thread;

  Impl(const LoadedModel& m, const Tokenizer& t, const SchedulerOptions& o, int64_t ctx)
      : model(m),
        tokenizer(t),
        opt(o),
        n_ctx(ctx),
        pool(o.n_threads),
        backend(engine::make_batch_backend(m, backend_options(o, ctx, &pool))),
        blocks(backend->n_blocks(), o.block_size),
        prompt_states(backend->recurrent_state() ? static_cast<uint64_t>(o.prompt_state_cache_mib) << 20 : 0,
                      o.prompt_state_min_tokens) {}

  static engine::BatchBackendOptions backend_options(const SchedulerOptions& o, int64_t ctx, ThreadPool* p) {
    engine::BatchBackendOptions b;
    b.device = o.device;
    b.n_ctx = ctx;
    b.kv_blocks = o.kv_blocks;
    b.block_size = o.block_size;
    b.max_batch_tokens = o.max_batch_tokens;
    b.max_seqs = o.max_running;
    b.kv_type = o.kv_type;
    b.pool = p;
    b.cuda_graphs = o.cuda_graphs;
    b.prefill_graph_max_tokens = o.prefill_graph_max_tokens;
    b.gpu_sampling = o.gpu_sampling;
    return b;
  }

  void loop();
  bool wait_for_work();
  void take_cancellations();
  void admit();
  bool try_admit(Sequence& s);
  void step();
  bool ensure_blocks(size_t index, int64_t n_positions);
  void preempt(Sequence& s);
  void after_forward(Sequence& s);
  bool restore_prompt_state(size_t index);
  void save_prompt_state(Sequence& s);
  void collect_sampling();
  void sample_step(std::span<const float> logits);
  void sample_step_on_device();
  void choose_token(Sequence& s, std::span<const float> row) const;
  void take_result(Sequence& s, GpuSampleResult& r) const;
  void emit_token(Sequence& s);
  bool deliver(Sequence& s, TokenEvent& event);
  void fill_logprobs(Sequence& s, std::span<const float> row) const;
  void finish(Sequence& s, FinishReason reason, std::exception_ptr error = nullptr);
  void drop_leavers();
  void publish_stats();
  void run_tasks();
  HousekeepingResult housekeeping(const HousekeepingOptions& options);
  void shutdown();
};

static int64_t steady_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// ---------------------------------------------------------------------------------------------
// Public API

Scheduler::Scheduler(const LoadedModel& model, const Tokenizer& tokenizer, const SchedulerOptions& options) {
  GA_CHECK(options.max_running > 0, InvalidArgument, "max_running must be positive, got ", options.max_running);
  GA_CHECK(options.max_queued >= 0, InvalidArgument, "max_queued must be >= 0, got ", options.max_queued);
  GA_CHECK(options.block_size > 0, InvalidArgument, "block_size must be positive, got ", options.block_size);
  GA_CHECK(options.max_batch_tokens >= options.max_running, InvalidArgument, "max_batch_tokens (",
           options.max_batch_tokens, ") must be >= max_running (", options.max_running,
           "): every running sequence decodes one token per step");
  GA_CHECK(options.kv_blocks >= 0, InvalidArgument, "kv_blocks must be >= 0 (0: automatic), got ", options.kv_blocks);
  GA_CHECK(options.poll_us >= -1, InvalidArgument, "poll_us must be >= 0 (0: never busy-wait) or -1 (automatic), got ",
           options.poll_us);
  GA_CHECK(options.n_threads >= 0, InvalidArgument, "n_threads must be >= 0 (0: all), got ", options.n_threads);
  GA_CHECK(options.prompt_state_cache_mib >= 0 && options.prompt_state_cache_mib <= (int64_t{1} << 30),
           InvalidArgument, "prompt_state_cache_mib must be in [0, 2^30] (0: off), got ",
           options.prompt_state_cache_mib);
  GA_CHECK(options.prompt_state_min_tokens >= 1, InvalidArgument, "prompt_state_min_tokens must be >= 1, got ",
           options.prompt_state_min_tokens);
  const int64_t n_ctx = engine::resolve_n_ctx(model.config, options.n_ctx);
  impl_ = std::make_unique<Impl>(model, tokenizer, options, n_ctx);  // picks the device (batch_backend.h)
  GA_LOG(Info, "scheduler on ", impl_->backend->description(),
         model.precision.mode == "native" ? "" : ", weights " + model.precision.mode);  // apply_precision's choice
  if (impl_->opt.poll_us < 0) {
    impl_->opt.poll_us =
        engine::cuda_device_index(impl_->backend->device()) >= 0 ? SchedulerOptions::kAutoPollMicroseconds : 0;
  }
  if (options.warm_up) {
    engine::warm_up_backend(*impl_->backend, n_ctx, options.block_size, options.max_batch_tokens, options.max_running);
    GA_LOG(Info, "warmed up: ", impl_->backend->description());  // what the warm-up captured (CUDA graphs)
  }
  impl_->snapshot.device = impl_->backend->device();
  const bool on_gpu = engine::cuda_device_index(impl_->backend->device()) >= 0;
  impl_->snapshot.kv_type = kv_type_name(on_gpu && options.kv_type == KvType::F32 ? KvType::F16 : options.kv_type);
  impl_->snapshot.weight_bytes = model.weight_bytes();
  impl_->snapshot.kv_blocks_total = impl_->backend->n_blocks();
  impl_->snapshot.recurrent_state = impl_->backend->recurrent_state();
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    impl_->signals.fetch_add(1, std::memory_order_release);
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint64_t Scheduler::submit(CompletionRequest request, TokenCallback on_token, DoneCallback on_done) {
  Impl& m = *impl_;
  const int64_t n_prompt = static_cast<int64_t>(request.prompt_tokens.size());
  GA_CHECK(n_prompt > 0, InvalidArgument, "the prompt has no tokens");
  for (size_t i = 0; i < request.prompt_tokens.size(); ++i) {
    const int32_t id = request.prompt_tokens[i];
    GA_CHECK(id >= 0 && id < m.model.config.n_vocab, InvalidArgument, "prompt token ", id, " at index ", i,
             " is outside the vocabulary [0, ", m.model.config.n_vocab, ")");
  }
  GA_CHECK(n_prompt <= m.n_ctx, OutOfRange, "the prompt has ", n_prompt, " tokens but the context holds ", m.n_ctx);
  GA_CHECK(n_prompt <= m.blocks.n_blocks() * m.blocks.block_size(), OutOfRange, "the prompt has ", n_prompt,
           " tokens but the KV cache holds ", m.blocks.n_blocks() * m.blocks.block_size());
  GA_CHECK(request.top_logprobs >= 0 && request.top_logprobs <= kMaxTopLogprobs, InvalidArgument,
           "top_logprobs = ", request.top_logprobs, " is outside [0, ", kMaxTopLogprobs, "]");
  std::vector<std::string> stop = request.stop;
  auto seq = std::make_unique<Sequence>(std::move(request), std::move(stop));  // validates sampling and stops
  seq->on_token = std::move(on_token);
  seq->on_done = std::move(on_done);
  seq->tokens = seq->req.prompt_tokens;
  seq->n_prompt = n_prompt;
  seq->strip_space = detail::strips_first_space(m.tokenizer, seq->tokens, 0);
  seq->submitted = Clock::now();
  seq->result.prompt_tokens = n_prompt;

  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    GA_CHECK(!m.stop, Unavailable, "the scheduler is shutting down");
    GA_CHECK(static_cast<int64_t>(m.waiting.size()) < m.opt.max_queued, Unavailable, "the request queue is full (",
             m.opt.max_queued, " waiting)");
    id = seq->id = m.next_id++;
    m.waiting.push_back(std::move(seq));
    m.active.fetch_add(1, std::memory_order_acq_rel);
    m.signals.fetch_add(1, std::memory_order_release);
  }
  m.wake.notify_all();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (id == 0 || id >= impl_->next_id) return;
    impl_->cancel_requests.insert(id);
    impl_->signals.fetch_add(1, std::memory_order_release);
  }
  impl_->wake.notify_all();
}

void Scheduler::expect_request() {
  Impl& m = *impl_;
  const int64_t until = steady_ns(Clock::now() + kAnnouncedRequestWindow);
  int64_t seen = m.announced_until_ns.load(std::memory_order_relaxed);
  while (seen < until && !m.announced_until_ns.compare_exchange_weak(seen, until, std::memory_order_acq_rel)) {
  }
  if (m.opt.poll_us <= 0) return;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.poll_until = std::max(m.poll_until, Clock::now() + std::chrono::microseconds(m.opt.poll_us));
  }
  m.wake.notify_all();  // no system call when the thread is not sleeping (busy, or already spinning)
}

bool Scheduler::idle() const {
  const Impl& m = *impl_;
  return m.active.load(std::memory_order_acquire) == 0 &&
         steady_ns(Clock::now()) >= m.announced_until_ns.load(std::memory_order_acquire);
}

bool Scheduler::wait_until_idle(std::chrono::milliseconds timeout) const {
  // The announced window ends without a notification: the wait wakes at least this often to see it end.
  constexpr auto kRecheck = std::chrono::milliseconds(10);
  const Impl& m = *impl_;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(m.mu);
  while (!idle()) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline || m.stop) return idle();
    m.idle_changed.wait_for(lock, std::min<Clock::duration>(deadline - now, kRecheck));
  }
  return true;
}

HousekeepingResult Scheduler::housekeep(const HousekeepingOptions& options) {
  GA_CHECK(std::isfinite(options.cached_idle_seconds) && options.cached_idle_seconds >= 0, InvalidArgument,
           "cached_idle_seconds must be a finite number >= 0, got ", options.cached_idle_seconds);
  Impl& m = *impl_;
  auto task = std::make_shared<std::packaged_task<HousekeepingResult()>>(
      [&m, options] { return m.housekeeping(options); });
  std::future<HousekeepingResult> done = task->get_future();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    GA_CHECK(!m.stop, Unavailable, "the scheduler is shutting down");
    m.tasks.emplace_back([task] { (*task)(); });
    m.signals.fetch_add(1, std::memory_order_release);
  }
  m.wake.notify_all();
  return done.get();
}

SchedulerStats Scheduler::stats() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  SchedulerStats s = m.snapshot;
  s.queued += static_cast<int>(m.waiting.size());
  const auto now = Clock::now();
  const double span = std::min(kRateWindowSeconds, seconds_between(m.started, now));
  uint64_t prompt = 0, generated = 0;
  for (const RateSample& r : m.window) {
    if (seconds_between(r.t, now) > kRateWindowSeconds) continue;
    prompt += r.prompt_tokens;
    generated += r.generated_tokens;
  }
  if (span > 0) {
    s.prompt_tokens_per_second = static_cast<double>(prompt) / span;
    s.generation_tokens_per_second = static_cast<double>(generated) / span;
  }
  return s;
}

int64_t Scheduler::n_ctx() const { return impl_->n_ctx; }
const LoadedModel& Scheduler::model() const { return impl_->model; }
const Tokenizer& Scheduler::tokenizer() const { return impl_->tokenizer; }

// ---------------------------------------------------------------------------------------------
// The scheduler thread

// GA_SCHEDULER_TRACE=1 (a diagnostic of a lone request's time to first token, docs/performance.md "Serving"): one
// stderr line per step that feeds a prompt and samples one row (a lone request's prefill), with the steady-clock
// times of the thread's wake-up, the forward's start and end, and the end of sampling and emission, to match with
// `serve --trace-timing`'s submit and first token (tools/device/serve.sh splits submit -> first token with them).
static bool trace_lone_prefills() {
  static const bool on = env_flag("GA_SCHEDULER_TRACE");
  return on;
}

static double steady_seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

void Scheduler::Impl::loop() {
  while (wait_for_work()) {
    const Clock::time_point t0 = Clock::now();
    woken_at = t0;
    run_tasks();
    take_cancellations();
    admit();
    step();
    step_seconds += seconds_between(t0, Clock::now());
    publish_stats();
  }
  shutdown();
}

// Returns when there is something to do (true) or the scheduler stops (false). Sleeps on `wake`,
// except inside a busy-wait window (expect_request), where it spins on `signals` without the lock.
bool Scheduler::Impl::wait_for_work() {
  std::unique_lock<std::mutex> lock(mu);
  const auto has_work = [this] {
    return stop || !cancel_requests.empty() || !waiting.empty() || !running.empty() || !preempted.empty() ||
           !tasks.empty();
  };
  while (!has_work()) {
    const Clock::time_point until = poll_until;
    if (Clock::now() < until) {
      const uint64_t seen = signals.load(std::memory_order_acquire);
      lock.unlock();
      spin_until([&] { return signals.load(std::memory_order_acquire) != seen; }, until);
      lock.lock();
    } else {
      wake.wait(lock);  // woken by submit, cancel, stop and expect_request; spurious wake-ups loop
    }
  }
  return !stop;
}

void Scheduler::Impl::take_cancellations() {
  std::unordered_set<uint64_t> ids;
  std::vector<SeqPtr> cancelled_waiting;
  {
    std::lock_guard<std::mutex> lock(mu);
    ids.swap(cancel_requests);  // ids of finished or unknown requests are simply dropped
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (ids.count((*it)->id) != 0) {
        cancelled_waiting.push_back(std::move(*it));
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (ids.empty()) return;
  for (SeqPtr& s : cancelled_waiting) finish(*s, FinishReason::Cancelled);
  for (auto it = preempted.begin(); it != preempted.end();) {
    if (ids.count((*it)->id) != 0) {
      finish(**it, FinishReason::Cancelled);
      it = preempted.erase(it);
    } else {
      ++it;
    }
  }
  for (SeqPtr& s : running) {
    if (ids.count(s->id) != 0) finish(*s, FinishReason::Cancelled);
  }
  drop_leavers();
}

void Scheduler::Impl::admit() {
  while (static_cast<int>(running.size()) < opt.max_running) {
    if (!preempted.empty()) {
      if (!try_admit(*preempted.front())) return;
      running.push_back(std::move(preempted.front()));
      preempted.pop_front();
      continue;
    }
    Sequence* candidate = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (waiting.empty()) return;
      candidate = waiting.front().get();  // only this thread removes from the queue: it stays the front
    }
    if (candidate->req.max_tokens == 0) {  // nothing to generate: no need to read the prompt
      SeqPtr s;
      {
        std::lock_guard<std::mutex> lock(mu);
        s = std::move(waiting.front());
        waiting.pop_front();
      }
      s->result.queue_seconds = seconds_between(s->submitted, Clock::now());
      finish(*s, FinishReason::Length);
      continue;
    }
    if (!try_admit(*candidate)) return;
    std::lock_guard<std::mutex> lock(mu);
    running.push_back(std::move(waiting.front()));
    waiting.pop_front();
  }
}

// Takes the cached prefix and checks that the rest of the sequence's tokens fits; on failure,
// gives the cached blocks back and changes nothing.
bool Scheduler::Impl::try_admit(Sequence& s) {
  const int64_t bs = blocks.block_size();
  const int64_t n_tokens = static_cast<int64_t>(s.tokens.size());
  // the last token is always computed; a recurrent state is the whole prefix's, never a block's
  const int64_t reusable = backend->recurrent_state() ? 0 : std::min(n_tokens - 1, s.n_prompt) / bs;
  engine::KvBlockManager::PrefixMatch match = blocks.match_prefix(s.tokens, reusable);
  const int64_t need = (n_tokens + bs - 1) / bs - static_cast<int64_t>(match.blocks.size());
  const int64_t headroom = static_cast<int64_t>(running.size());
  if (!running.empty() && blocks.n_available() < need + headroom) {
    blocks.release_table(match.blocks);
    return false;
  }
  s.n_computed = static_cast<int64_t>(match.blocks.size()) * bs;
  s.n_published = static_cast<int64_t>(match.blocks.size());
  s.chain_key = match.key;
  s.blocks = std::move(match.blocks);
  if (!s.scheduled_once) {
    s.scheduled_once = true;
    s.result.cached_prompt_tokens = s.n_computed;
    s.result.queue_seconds = seconds_between(s.submitted, Clock::now());
  }
  return true;
}

void Scheduler::Impl::preempt(Sequence& s) {
  ++preemptions;
  blocks.release_table(s.blocks);
  s.n_computed = 0;
  s.n_published = 0;
  s.chain_key = engine::KvBlockManager::kRootKey;
  s.save_state_at = 0;
  s.state_looked_up = false;
  s.leaving = true;
}

// Makes s's block table cover n_positions positions, preempting others when the pool is empty.
// False when s itself left (preempted or finished) instead.
bool Scheduler::Impl::ensure_blocks(size_t index, int64_t n_positions) {
  Sequence& s = *running[index];
  const int64_t bs = blocks.block_size();
  const size_t need = static_cast<size_t>((n_positions + bs - 1) / bs);
  while (s.blocks.size() < need) {
    const int32_t b = blocks.allocate();
    if (b >= 0) {
      s.blocks.push_back(b);
      continue;
    }
    Sequence* victim = nullptr;
    for (size_t j = running.size(); j-- > 0;) {
      Sequence& other = *running[j];
      if (j != index && !other.leaving && other.step_tokens == 0) {
        victim = &other;
        break;
      }
    }
    if (victim != nullptr) {
      preempt(*victim);
      continue;
    }
    const bool alone = std::none_of(running.begin(), running.end(),
                                    [&s](const SeqPtr& o) { return o.get() != &s && !o->leaving; });
    if (alone) {
      // The pool cannot hold this sequence's context: it ends here, with whatever text it holds.
      TokenEvent rest;
      rest.token = -1;
      rest.text = s.streamer.flush();
      if (!rest.text.empty()) deliver(s, rest);
      finish(s, FinishReason::Length);
    } else {
      preempt(s);
    }
    return false;
  }
  return true;
}

void Scheduler::Impl::step() {
  for (SeqPtr& s : running) {
    s->step_tokens = 0;
    s->logits_row = -1;
  }
  step_seqs.clear();
  batch.clear();
  int64_t budget = opt.max_batch_tokens;
  int64_t n_logits = 0;
  for (const bool decode_pass : {true, false}) {  // decode tokens first, then prompt chunks
    for (size_t i = 0; i < running.size() && budget > 0; ++i) {
      Sequence& s = *running[i];
      // A recurrent sequence about to read its prompt may start from a cached state instead (then a single
      // token may be left: it runs in this pass all the same).
      const bool restored = !decode_pass && !s.leaving && s.step_tokens == 0 && restore_prompt_state(i);
      const int64_t remaining = static_cast<int64_t>(s.tokens.size()) - s.n_computed;
      if (s.leaving || s.step_tokens > 0 || remaining <= 0 || (decode_pass != (remaining == 1) && !restored)) {
        continue;
      }
      int64_t n_new = std::min(remaining, budget);
      // A prompt whose first n - 1 tokens' state is to be kept stops there; its last token runs next step.
      if (s.save_state_at > s.n_computed) n_new = std::min(n_new, s.save_state_at - s.n_computed);
      if (!ensure_blocks(i, s.n_computed + n_new)) continue;
      s.step_tokens = n_new;
      const bool samples = n_new == remaining;
      if (samples) s.logits_row = n_logits++;
      const int32_t seq_index = static_cast<int32_t>(step_seqs.size());
      for (int64_t t = 0; t < n_new; ++t) {
        arch::BatchToken e;
        e.pos = s.n_computed + t;
        e.token = s.tokens[static_cast<size_t>(e.pos)];
        e.seq = seq_index;
        e.logits = samples && t == n_new - 1;
        batch.push_back(e);
      }
      step_seqs.push_back(&s);
      budget -= n_new;
    }
  }
  // Only sequences outside the batch are ever preempted or finished while it is built, so every
  // sequence in step_seqs is still running here.
  if (!batch.empty()) {
    tables.clear();
    for (Sequence* s : step_seqs) tables.emplace_back(s->blocks);  // block tables are final for this step
    try {
      ++steps;
      const Clock::time_point t0 = Clock::now();
      // Every step with a sampled row samples it on the device when the backend can, a lone row too: the forward
      // returns with the step still queued on the GPU (forward_for_sampling) and the sampling is queued behind it,
      // so the host's part overlaps the GPU and a lone greedy row is one argmax kernel. (A lone row copied to the
      // host after a synchronized forward and sampled there reached its first token ~0.05 ms later on the H200:
      // 1B F16, 128-token prompt.) forward_seconds is then the host's part and sample_seconds includes the wait for
      // the step.
      const bool on_device = backend->samples_on_device() && n_logits > 0;
      std::span<const float> logits;  // host rows (empty when they stay on the device)
      int64_t rows = 0;
      if (on_device) {
        rows = backend->forward_for_sampling(batch, tables);
      } else {
        logits = backend->forward(batch, tables);
        rows = static_cast<int64_t>(logits.size()) / backend->n_vocab();
        GA_CHECK(static_cast<int64_t>(logits.size()) == rows * backend->n_vocab(), Internal, "the forward returned ",
                 logits.size(), " logits, not whole rows");
      }
      const Clock::time_point t1 = Clock::now();
      forward_seconds += seconds_between(t0, t1);
      const bool traced = trace_lone_prefills() && n_logits == 1 && batch.size() > 1;
      GA_CHECK(rows == n_logits, Internal, "the forward returned ", rows, " logits rows for ", n_logits);
      for (Sequence* s : step_seqs) after_forward(*s);
      if (on_device) {
        sample_step_on_device();
      } else {
        sample_step(logits);
      }
      const Clock::time_point t2 = Clock::now();
      sample_seconds += seconds_between(t1, t2);
      if (traced) {  // forward_done: the forward call's return (the step may still run on the GPU: on_device)
        std::fprintf(stderr,
                     "scheduler lone prefill: tokens %zu woken %.6f forward %.6f forward_done %.6f sampled %.6f "
                     "chosen %.6f device %d\n",
                     batch.size(), steady_seconds(woken_at), steady_seconds(t0), steady_seconds(t1),
                     steady_seconds(t2), steady_seconds(chosen_at), on_device ? 1 : 0);
      }
    } catch (...) {
      const std::exception_ptr error = std::current_exception();
      GA_LOG(Error, "forward step failed; its requests end with the error");
      for (Sequence* s : step_seqs) {
        if (!s->leaving) finish(*s, FinishReason::Cancelled, error);
      }
    }
  }
  drop_leavers();
}

void Scheduler::Impl::after_forward(Sequence& s) {
  const int64_t first = s.n_computed;
  s.n_computed += s.step_tokens;
  if (first < s.n_prompt) step_prompt_tokens += static_cast<uint64_t>(std::min(s.n_computed, s.n_prompt) - first);
  if (s.save_state_at > 0 && s.n_computed == s.save_state_at) save_prompt_state(s);
  // Publish the prompt blocks this step completed.
  const int64_t bs = blocks.block_size();
  const int64_t filled = backend->recurrent_state() ? 0 : std::min(s.n_computed, s.n_prompt);
  while ((s.n_published + 1) * bs <= filled) {
    const std::span<const int32_t> chunk(s.tokens.data() + s.n_published * bs, static_cast<size_t>(bs));
    s.chain_key = blocks.publish(s.blocks[static_cast<size_t>(s.n_published)], s.chain_key, chunk);
    ++s.n_published;
  }
}

// Asks the prompt-state cache once per (re)start of a recurrent sequence, before its first step: on a hit the
// cached state is put back beside its first block and the prompt continues after the cached tokens. Decides
// too whether this prompt's state is kept (save_state_at). False when nothing was restored.
bool Scheduler::Impl::restore_prompt_state(size_t index) {
  Sequence& s = *running[index];
  if (!prompt_states.enabled() || s.state_looked_up || s.n_computed != 0) return false;
  s.state_looked_up = true;
  const int64_t prefix = s.n_prompt - 1;  // the last prompt token is always computed
  if (prefix < prompt_states.min_tokens()) return false;
  if (!ensure_blocks(index, 1)) return false;  // the block the state goes beside (s may have left instead)
  const std::span<const int32_t> prompt(s.tokens.data(), static_cast<size_t>(s.n_prompt));
  const engine::PromptStateCache::Entry* hit = prompt_states.longest_prefix(prompt, prefix);
  // kept already when the longest cached prefix is this one
  s.save_state_at = hit != nullptr && static_cast<int64_t>(hit->tokens.size()) == prefix ? 0 : prefix;
  if (hit == nullptr) return false;
  try {
    backend->restore_recurrent_state(s.blocks[0], hit->state);
  } catch (const std::exception& e) {
    GA_LOG(Warn, "prompt-state cache: restoring a state of ", hit->tokens.size(), " tokens failed (", e.what(),
           "); the prompt is read from its start");
    return false;
  }
  s.n_computed = static_cast<int64_t>(hit->tokens.size());
  if (s.result.cached_prompt_tokens == 0) s.result.cached_prompt_tokens = s.n_computed;
  return true;
}

// After the step that brought s to save_state_at: its state is copied into the prompt-state cache. A failure
// (host memory) costs only the cache entry.
void Scheduler::Impl::save_prompt_state(Sequence& s) {
  const size_t n = static_cast<size_t>(s.save_state_at);
  s.save_state_at = 0;
  try {
    prompt_states.insert(std::span<const int32_t>(s.tokens.data(), n), backend->save_recurrent_state(s.blocks[0]));
  } catch (const std::exception& e) {
    GA_LOG(Warn, "prompt-state cache: keeping the state of a ", n, "-token prompt failed: ", e.what());
  }
}

// The step's one sampling call site: every sequence that samples gets its next token chosen from
// its logits row ([n_vocab] of `logits`), the choices in parallel on the pool (a sampler, its
// history and its logprobs belong to one sequence; the rows and the tokenizer are only read), then
// the tokens are emitted in batch order on this thread (callbacks, stop strings, finishing).
void Scheduler::Impl::collect_sampling() {
  sampling.clear();
  for (Sequence* s : step_seqs) {
    if (s->logits_row >= 0 && !s->leaving) sampling.push_back(s);
  }
}

void Scheduler::Impl::sample_step(std::span<const float> logits) {
  const size_t n_vocab = static_cast<size_t>(backend->n_vocab());
  collect_sampling();
  const auto row_of = [&](const Sequence& s) {
    return logits.subspan(static_cast<size_t>(s.logits_row) * n_vocab, n_vocab);
  };
  pool.parallel_for(static_cast<int64_t>(sampling.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      Sequence& s = *sampling[static_cast<size_t>(i)];
      choose_token(s, row_of(s));
    }
  });
  chosen_at = Clock::now();
  for (Sequence* s : sampling) emit_token(*s);
}

// sample_step with the rows on the device (the CUDA backend): the same choices, made by
// sample_rows_on_gpu on this thread (the host part is a walk over K candidates per row, so the pool
// would not pay for itself), one call per run of consecutive rows (one call for a whole step: rows
// are in batch order and no sampling sequence leaves during a step), then the same emission.
void Scheduler::Impl::sample_step_on_device() {
  collect_sampling();
  std::vector<GpuSampleRow> rows;
  for (size_t begin = 0; begin < sampling.size();) {
    size_t end = begin + 1;
    while (end < sampling.size() && sampling[end]->logits_row == sampling[end - 1]->logits_row + 1) ++end;
    rows.clear();
    for (size_t i = begin; i < end; ++i) {
      Sequence& s = *sampling[i];
      rows.push_back({&s.sampler, s.tokens, s.req.logprobs ? s.req.top_logprobs : -1});
    }
    std::vector<GpuSampleResult> results = backend->sample_rows(sampling[begin]->logits_row, rows);
    for (size_t i = begin; i < end; ++i) take_result(*sampling[i], results[i - begin]);
    begin = end;
  }
  chosen_at = Clock::now();
  for (Sequence* s : sampling) emit_token(*s);
}

// The GPU sampler's answer in choose_token's form (fill_logprobs' figures: raw log-softmax).
void Scheduler::Impl::take_result(Sequence& s, GpuSampleResult& r) const {
  s.chosen = r.token;
  s.sample_error = r.error;
  if (r.error || !s.req.logprobs) return;
  const auto entry = [&](int32_t token, float logprob) {
    TokenLogprob lp;
    lp.token = token;
    lp.text = tokenizer.token_to_piece(token);
    lp.logprob = logprob;
    return lp;
  };
  s.chosen_logprob = entry(r.token, r.logprob);
  s.top_logprobs.clear();
  for (const auto& [token, logprob] : r.top) s.top_logprobs.push_back(entry(token, logprob));
}

// Runs on a pool thread: touches only s (its sampler, chosen token and logprobs).
void Scheduler::Impl::choose_token(Sequence& s, std::span<const float> row) const {
  s.chosen = -1;
  s.sample_error = nullptr;
  try {
    s.chosen = s.sampler.sample(row, s.tokens);
    if (s.req.logprobs) fill_logprobs(s, row);
  } catch (...) {
    s.sample_error = std::current_exception();
  }
}

void Scheduler::Impl::emit_token(Sequence& s) {
  if (s.sample_error) {
    finish(s, FinishReason::Cancelled, s.sample_error);
    return;
  }
  const int32_t id = s.chosen;
  if (!s.req.ignore_eos && tokenizer.is_eog(id)) {
    TokenEvent rest;  // held-back text is final now; it has no token of its own
    rest.token = -1;
    rest.text = s.streamer.flush();
    if (!rest.text.empty() && !deliver(s, rest)) return;
    finish(s, FinishReason::Eos);
    return;
  }
  s.tokens.push_back(id);
  ++s.result.completion_tokens;
  ++step_generated_tokens;

  std::string piece = tokenizer.token_to_piece(id);
  if (s.strip_space) {  // only the very first generated piece, as generate() does
    if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    s.strip_space = false;
  }
  const detail::TextStreamer::Update update = s.streamer.push(piece);
  TokenEvent event;
  event.token = id;
  event.text = update.ready;
  bool last = true;
  FinishReason reason = FinishReason::Length;
  if (update.stopped) {
    reason = FinishReason::Stop;
  } else if (s.req.max_tokens >= 0 && s.result.completion_tokens >= s.req.max_tokens) {
    reason = FinishReason::Length;
  } else if (static_cast<int64_t>(s.tokens.size()) > n_ctx) {  // the new token has no position left
    reason = FinishReason::Length;
  } else {
    last = false;
  }
  if (last && reason == FinishReason::Length) event.text += s.streamer.flush();
  if (s.req.logprobs) {
    event.chosen = std::move(s.chosen_logprob);
    event.top = std::move(s.top_logprobs);
  }
  if (!deliver(s, event)) return;
  if (last) finish(s, reason);
}

void Scheduler::Impl::fill_logprobs(Sequence& s, std::span<const float> row) const {
  // OpenAI reports the model's distribution: log-softmax of the raw logits, before penalties,
  // temperature and filters.
  const double lse = engine::raw_log_sum_exp(row);
  const auto entry = [&](int32_t token) {
    TokenLogprob lp;
    lp.token = token;
    lp.text = tokenizer.token_to_piece(token);
    lp.logprob = static_cast<float>(static_cast<double>(row[static_cast<size_t>(token)]) - lse);
    return lp;
  };
  s.chosen_logprob = entry(s.chosen);
  s.top_logprobs.clear();
  if (s.req.top_logprobs <= 0) return;
  for (const int32_t id : engine::top_logit_ids(row, static_cast<size_t>(s.req.top_logprobs))) {
    s.top_logprobs.push_back(entry(id));
  }
}

// Hands an event to the client. False (and the request finished) when it cancels or throws.
bool Scheduler::Impl::deliver(Sequence& s, TokenEvent& event) {
  if (event.token >= 0 && !s.produced_token) {
    s.produced_token = true;
    s.result.time_to_first_token = seconds_between(s.submitted, Clock::now());
  }
  s.result.text += event.text;
  bool keep = true;
  try {
    keep = !s.on_token || s.on_token(event);
  } catch (...) {
    finish(s, FinishReason::Cancelled, std::current_exception());
    return false;
  }
  if (!keep) finish(s, FinishReason::Cancelled);
  return keep;
}

void Scheduler::Impl::finish(Sequence& s, FinishReason reason, std::exception_ptr error) {
  if (s.done) return;  // e.g. a client that cancels from its last token's callback
  blocks.release_table(s.blocks);
  s.leaving = s.done = true;
  s.result.finish = reason;
  s.result.total_seconds = seconds_between(s.submitted, Clock::now());
  if (reason == FinishReason::Cancelled) {
    ++cancelled;
  } else {
    ++finished;
  }
  if (s.on_done) {
    try {
      s.on_done(s.result, error);
    } catch (const std::exception& e) {
      GA_LOG(Error, "a completion's on_done callback threw: ", e.what());
    } catch (...) {
      GA_LOG(Error, "a completion's on_done callback threw");
    }
  }
  // After on_done: the client has its answer before low-priority work may start.
  if (active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    { std::lock_guard<std::mutex> lock(mu); }  // a waiter between its idle() check and its sleep sees the notify
    idle_changed.notify_all();
  }
}

// Removes finished and preempted sequences from `running`; preempted ones go back to the front of
// the queue in admission order.
void Scheduler::Impl::drop_leavers() {
  std::vector<SeqPtr> kept;
  std::vector<SeqPtr> requeue;
  for (SeqPtr& s : running) {
    if (!s->leaving) {
      kept.push_back(std::move(s));
    } else if (!s->done) {  // preempted
      s->leaving = false;
      requeue.push_back(std::move(s));
    }
  }
  running = std::move(kept);
  for (auto it = requeue.rbegin(); it != requeue.rend(); ++it) preempted.push_front(std::move(*it));
}

void Scheduler::Impl::publish_stats() {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu);
  SchedulerStats& s = snapshot;
  s.running = static_cast<int>(running.size());
  s.queued = static_cast<int>(preempted.size());  // stats() adds the waiting queue
  s.kv_blocks_used = blocks.n_used();
  s.kv_blocks_cached = blocks.n_cached();
  s.requests_finished = finished;
  s.requests_cancelled = cancelled;
  s.preemptions = preemptions;
  s.prompt_states = prompt_states.entries();
  s.prompt_state_bytes = prompt_states.bytes();
  s.prompt_state_hits = prompt_states.hits();
  s.steps = steps;
  s.step_seconds = step_seconds;
  s.forward_seconds = forward_seconds;
  s.sample_seconds = sample_seconds;
  s.prompt_tokens_total += step_prompt_tokens;
  s.generated_tokens_total += step_generated_tokens;
  if (step_prompt_tokens + step_generated_tokens > 0) {
    window.push_back({now, step_prompt_tokens, step_generated_tokens});
  }
  step_prompt_tokens = step_generated_tokens = 0;
  while (!window.empty() && seconds_between(window.front().t, now) > kRateWindowSeconds) window.pop_front();
}

void Scheduler::Impl::run_tasks() {
  std::deque<std::function<void()>> now;
  {
    std::lock_guard<std::mutex> lock(mu);
    now.swap(tasks);
  }
  for (auto& task : now) task();  // a packaged_task: its exception goes to the caller's future
}

HousekeepingResult Scheduler::Impl::housekeeping(const HousekeepingOptions& o) {
  // Past ~30 years a cutoff would overflow the clock: nothing is that old.
  constexpr double kMaxIdleSeconds = 1e9;
  HousekeepingResult r;
  r.cached_blocks_before = blocks.n_cached();
  if (o.cached_idle_seconds <= kMaxIdleSeconds) {
    const auto age = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.cached_idle_seconds));
    r.cached_blocks_freed = blocks.evict_cached_released_before(Clock::now() - age);
    r.prompt_states_freed = prompt_states.drop_idle(age);
  }
  r.prompt_states_after = prompt_states.entries();
  if (o.compact) r.free_list_reordered = blocks.compact();
  r.free_blocks_after = blocks.n_free();
  r.running = static_cast<int>(running.size());
  r.recurrent_state = backend->recurrent_state();
  publish_stats();
  return r;
}

void Scheduler::Impl::shutdown() {
  run_tasks();  // housekeeping asked for before the stop: its callers are waiting
  std::deque<SeqPtr> rest;
  {
    std::lock_guard<std::mutex> lock(mu);
    rest.swap(waiting);
  }
  for (SeqPtr& s : running) finish(*s, FinishReason::Cancelled);
  for (SeqPtr& s : preempted) finish(*s, FinishReason::Cancelled);
  for (SeqPtr& s : rest) finish(*s, FinishReason::Cancelled);
  running.clear();
  preempted.clear();
  publish_stats();
}

}  // namespace ga
