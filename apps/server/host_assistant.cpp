// See host_assistant.h.
#include "server/host_assistant.h"

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "gpu_accel/error.h"
#include "runtime/engine/stepped_generation.h"

namespace ga::server {

namespace {

using Clock = std::chrono::steady_clock;
// How often a paused job looks at its cancellation and the stop flag while the main work runs.
constexpr auto kPausedRecheck = std::chrono::milliseconds(50);

SessionOptions session_options(const HostAssistantOptions& o) {
  SessionOptions s;
  s.device = o.device;
  s.n_threads = o.n_threads;
  s.n_ctx = o.n_ctx;
  return s;
}

}  // namespace

HostAssistant::HostAssistant(const LoadedModel& model, const Tokenizer& tokenizer, const Scheduler& main,
                             HostAssistantOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      main_(main),
      options_(std::move(options)),
      session_(model, session_options(options_)) {
  GA_CHECK(options_.prefill_chunk > 0, InvalidArgument, "the host's prefill chunk must be positive, got ",
           options_.prefill_chunk);
  GA_CHECK(options_.max_queued >= 0, InvalidArgument, "the host's queue limit must be >= 0, got ", options_.max_queued);
  worker_ = std::thread([this] { loop(); });
}

HostAssistant::~HostAssistant() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int64_t HostAssistant::n_ctx() const {
  return session_.n_ctx();
}

std::string HostAssistant::device_description() const {
  return session_.device_description();
}

uint64_t HostAssistant::submit(HostJob job) {
  GA_CHECK(!job.prompt_tokens.empty(), InvalidArgument, "the host's prompt has no tokens");
  GA_CHECK(static_cast<int64_t>(job.prompt_tokens.size()) < session_.n_ctx(), OutOfRange, "the host's prompt has ",
           job.prompt_tokens.size(), " tokens but its context holds ", session_.n_ctx());
  for (const int32_t id : job.prompt_tokens) {
    GA_CHECK(id >= 0 && id < model_.config.n_vocab, InvalidArgument, "host prompt token ", id,
             " is outside the vocabulary");
  }
  Sampler check(job.generation.sampling);  // bad sampling parameters fail here, not on the worker
  (void)check;
  std::lock_guard<std::mutex> lock(mutex_);
  GA_CHECK(!stop_, Unavailable, "the host assistant is stopping");
  GA_CHECK(static_cast<int>(queue_.size()) < options_.max_queued, Unavailable, "the host's queue is full (",
           options_.max_queued, " waiting)");
  const uint64_t id = next_id_++;
  queue_.push_back({id, std::move(job)});
  wake_.notify_all();
  return id;
}

void HostAssistant::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool queued = std::any_of(queue_.begin(), queue_.end(), [id](const Queued& q) { return q.id == id; });
  if (id == 0 || (id != running_id_ && !queued)) return;  // finished or unknown: nothing to remember
  cancel_ids_.push_back(id);
}

HostAssistantStats HostAssistant::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  HostAssistantStats s;
  s.state = state_;
  s.steps = steps_.load(std::memory_order_acquire);
  s.pauses = pauses_;
  s.jobs_finished = finished_;
  s.jobs_cancelled = cancelled_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

bool HostAssistant::cancelled(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_ || std::find(cancel_ids_.begin(), cancel_ids_.end(), id) != cancel_ids_.end();
}

bool HostAssistant::wait_for_idle_main(uint64_t id) {
  if (main_.idle()) return !cancelled(id);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++pauses_;
    state_ = "paused";
  }
  while (!main_.wait_until_idle(kPausedRecheck)) {
    if (cancelled(id)) return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = "generating";
  return !stop_ && std::find(cancel_ids_.begin(), cancel_ids_.end(), id) == cancel_ids_.end();
}

void HostAssistant::run(Queued& q) {
  HostJobResult result;
  result.prompt_tokens = static_cast<int64_t>(q.job.prompt_tokens.size());
  std::exception_ptr error;
  const Clock::time_point start = Clock::now();
  uint64_t pauses_before = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pauses_before = pauses_;
  }
  try {
    session_.reset();  // every job starts from an empty context
    engine::SteppedGeneration gen(session_, tokenizer_, q.job.prompt_tokens, q.job.generation, options_.prefill_chunk);
    while (!gen.finished()) {
      if (!wait_for_idle_main(q.id)) {
        gen.cancel();
        break;
      }
      const std::string text = gen.step();
      ++result.steps;
      steps_.fetch_add(1, std::memory_order_acq_rel);
      if (!text.empty() && q.job.on_text && !q.job.on_text(text)) gen.cancel();
    }
    result.text = gen.text();
    result.finish = gen.finish();
    result.completion_tokens = static_cast<int64_t>(gen.tokens().size());
  } catch (...) {
    error = std::current_exception();
    result.finish = FinishReason::Cancelled;
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result.pauses = static_cast<int64_t>(pauses_ - pauses_before);
    if (result.finish == FinishReason::Cancelled) {
      ++cancelled_;
    } else {
      ++finished_;
    }
  }
  if (!q.job.on_done) return;
  try {
    q.job.on_done(result, error);
  } catch (...) {
    GA_LOG(Error, "a host job's on_done callback threw");
  }
}

void HostAssistant::loop() {
  while (true) {
    Queued q;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      q = std::move(queue_.front());
      queue_.pop_front();
      running_id_ = q.id;
      state_ = "generating";
    }
    run(q);
    std::lock_guard<std::mutex> lock(mutex_);
    running_id_ = 0;
    state_ = "idle";
    std::erase(cancel_ids_, q.id);
  }
  // Stopping: the queued jobs end cancelled, each told once.
  std::deque<Queued> rest;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rest.swap(queue_);
  }
  for (Queued& q : rest) {
    HostJobResult r;
    r.finish = FinishReason::Cancelled;
    r.prompt_tokens = static_cast<int64_t>(q.job.prompt_tokens.size());
    if (q.job.on_done) q.job.on_done(r, nullptr);
  }
}

}  // namespace ga::server
