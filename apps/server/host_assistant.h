// The host assistant's engine: a small model on its own Session (the CPU by default) that answers
// one job at a time, and only while the main scheduler has nothing to do.
//
// Priority: the host is the lowest-priority work in the server. Its worker runs a job as a
// SteppedGeneration (stepped_generation.h: a step is one prompt chunk or one token) and, before every
// step, asks the main Scheduler whether it is idle (Scheduler::idle(): nothing queued, running or
// announced by an arriving request's head). When it is not, the job PAUSES: the worker sleeps in
// Scheduler::wait_until_idle() with the job's session state intact and RESUMES where it stopped once the
// main work is done. So a main request that arrives while the host is generating waits for at most the
// one host step already under way (and on a GPU server not even that: the host computes on the CPU).
// A paused job is never cancelled for being paused; it is cancelled only by its client (cancel(), or
// its text callback returning false) or by the server stopping, and always at a step boundary.
//
// Callbacks run on the worker thread and must be quick (copy and return), like the Scheduler's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu_accel/generate.h"
#include "gpu_accel/model.h"
#include "gpu_accel/scheduler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"

namespace ga::server {

struct HostAssistantOptions {
  std::string device = "cpu";  // the host's Session device (serve --host-device)
  int n_threads = 0;           // CPU threads of the host's forward; 0: all
  int64_t n_ctx = 0;           // the host's context; 0: the model's (capped at 4096)
  int64_t prefill_chunk = 32;  // prompt tokens per host step
  int max_queued = 16;         // waiting jobs beyond which submit() throws Unavailable
};

struct HostJobResult {
  std::string text;
  FinishReason finish = FinishReason::Length;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t steps = 0;   // host steps this job took
  int64_t pauses = 0;  // times it gave way to main work
  double seconds = 0;  // from its start to its end, pauses included
};

struct HostJob {
  std::vector<int32_t> prompt_tokens;
  GenerateOptions generation;                                             // max_tokens, sampling, stop strings
  std::function<bool(const std::string& text)> on_text;                   // false: cancel
  std::function<void(const HostJobResult&, std::exception_ptr)> on_done;  // exactly once
};

struct HostAssistantStats {
  std::string state;    // "idle" (no job), "generating", "paused" (waiting for the main work to finish)
  uint64_t steps = 0;   // host steps run, every job together
  uint64_t pauses = 0;  // times a job gave way to main work
  uint64_t jobs_finished = 0;
  uint64_t jobs_cancelled = 0;
  int queued = 0;
};

class HostAssistant {
 public:
  // `main`: the scheduler the host yields to. The model, tokenizer and scheduler must outlive it.
  HostAssistant(const LoadedModel& model, const Tokenizer& tokenizer, const Scheduler& main,
                HostAssistantOptions options);
  ~HostAssistant();  // cancels the running and queued jobs (their on_done is called) and joins
  HostAssistant(const HostAssistant&) = delete;
  HostAssistant& operator=(const HostAssistant&) = delete;

  // Queues a job; returns its id. Throws InvalidArgument / OutOfRange (prompt, options, context) before
  // queueing, Unavailable when max_queued jobs wait or the assistant is stopping.
  uint64_t submit(HostJob job);
  void cancel(uint64_t id);  // no-op for finished or unknown ids

  HostAssistantStats stats() const;
  // Counts every host step as it completes (tests measure the main request's delay in host steps).
  uint64_t steps() const { return steps_.load(std::memory_order_acquire); }
  int64_t n_ctx() const;
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const LoadedModel& model() const { return model_; }
  std::string device_description() const;

 private:
  struct Queued {
    uint64_t id = 0;
    HostJob job;
  };
  void loop();
  void run(Queued& job);
  bool cancelled(uint64_t id);
  // Waits until the main scheduler is idle; false when the job was cancelled or the assistant stops.
  bool wait_for_idle_main(uint64_t id);

  const LoadedModel& model_;
  const Tokenizer& tokenizer_;
  const Scheduler& main_;
  HostAssistantOptions options_;
  Session session_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  std::vector<uint64_t> cancel_ids_;
  uint64_t next_id_ = 1;
  uint64_t running_id_ = 0;
  bool stop_ = false;
  std::string state_ = "idle";
  uint64_t pauses_ = 0, finished_ = 0, cancelled_ = 0;
  std::atomic<uint64_t> steps_{0};
  std::thread worker_;
};

}  // namespace ga::server
