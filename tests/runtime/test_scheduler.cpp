// The continuous-batching Scheduler on stories260K.
//
// The reference for every output is the same request run alone through ga::generate_from_tokens on
// a Session (the single-sequence loop, itself checked against llama2.c's run.c in test_generate.cpp):
// tokens, text, streamed text and finish reason must be identical, whether the requests ran 16 at a
// time, waited for KV blocks, were preempted and recomputed, or reused a cached prefix. Logprobs are
// checked against the log-softmax of a Session's logits. The rest checks the contract of
// gpu_accel/scheduler.h: errors from submit(), cancellation, the queue limit, block accounting and
// on_done exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/stories_scheduler.h"
#include "common/test_data.h"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"
#include "gpu_accel/generate.h"
#include "gpu_accel/scheduler.h"

namespace ga {
namespace {

using test::stories;
using test::tokenizer;
using test::wait_idle;
const std::vector<std::string>& kPrompts = test::kStoryPrompts;

struct Outcome {
  std::vector<int32_t> tokens;  // from the events (text-only events excluded)
  std::vector<TokenEvent> events;
  std::string streamed;
  CompletionResult result;
  std::exception_ptr error;
  int done_calls = 0;
};

// Submits requests and collects their events; callbacks run on the scheduler's thread.
class Collector {
 public:
  uint64_t submit(Scheduler& s, int key, CompletionRequest req,
                  std::function<bool(const TokenEvent&)> hook = {}) {
    return s.submit(
        std::move(req),
        [this, key, hook](const TokenEvent& e) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            Outcome& o = outcomes_[key];
            if (e.token >= 0) o.tokens.push_back(e.token);
            o.events.push_back(e);
            o.streamed += e.text;
          }
          return !hook || hook(e);
        },
        [this, key](const CompletionResult& r, std::exception_ptr error) {
          std::lock_guard<std::mutex> lock(mu_);
          Outcome& o = outcomes_[key];
          o.result = r;
          o.error = error;
          ++o.done_calls;
          ++n_done_;
          cv_.notify_all();
        });
  }
  void wait(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(60), [&] { return n_done_ >= n; }))
        << "only " << n_done_ << " of " << n << " requests finished";
  }
  Outcome get(int key) {
    std::lock_guard<std::mutex> lock(mu_);
    return outcomes_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Outcome> outcomes_;
  int n_done_ = 0;
};

CompletionRequest request(const std::string& prompt, int64_t max_tokens, float temperature = 0.0f,
                          uint64_t seed = 0) {
  CompletionRequest r;
  r.prompt_tokens = tokenizer().encode(prompt, true);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

GenerateResult alone(const CompletionRequest& r, int64_t n_ctx) {
  SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 1;
  Session session(stories(), so);
  GenerateOptions o;
  o.max_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.stop = r.stop;
  o.ignore_eos = r.ignore_eos;
  return generate_from_tokens(session, tokenizer(), r.prompt_tokens, o);
}

void expect_same_as_alone(const Outcome& got, const CompletionRequest& r, int64_t n_ctx) {
  const GenerateResult want = alone(r, n_ctx);
  EXPECT_EQ(got.done_calls, 1);
  EXPECT_FALSE(got.error);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.result.text, want.text);
  EXPECT_EQ(got.streamed, want.text);
  EXPECT_EQ(finish_reason_name(got.result.finish), std::string(finish_reason_name(want.finish)));
  EXPECT_EQ(got.result.completion_tokens, static_cast<int64_t>(want.tokens.size()));
  EXPECT_EQ(got.result.prompt_tokens, static_cast<int64_t>(r.prompt_tokens.size()));
}

TEST(Scheduler, ConcurrentGreedyRequestsEqualEachAlone) {
  SchedulerOptions opt;
  opt.n_ctx = 96;
  opt.n_threads = 2;
  opt.max_running = 16;
  Scheduler sched(stories(), tokenizer(), opt);
  Collector c;
  std::vector<CompletionRequest> reqs;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const CompletionRequest r = test::concurrent_greedy_request(i);
    reqs.push_back(r);
    c.submit(sched, static_cast<int>(i), r);
  }
  c.wait(static_cast<int>(reqs.size()));
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    expect_same_as_alone(c.get(static_cast<int>(i)), reqs[i], opt.n_ctx);
  }
  const SchedulerStats st = wait_idle(sched);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.requests_finished, reqs.size());
  EXPECT_EQ(st.preemptions, 0u);  // the default pool holds max_running full contexts
  EXPECT_GT(st.generated_tokens_total, 0u);
  EXPECT_GT(st.generation_tokens_per_second, 0.0);
  EXPECT_EQ(st.device, "cpu");
  EXPECT_EQ(st.weight_bytes, stories().weight_bytes());
}

TEST(Scheduler, SeededSamplingIsReproducibleUnderConcurrency) {
  SchedulerOptions opt;
  opt.n_ctx = 128;
  opt.n_threads = 2;
  Scheduler sched(stories(), tokenizer(), opt);
  Collector c;
  std::vector<CompletionRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    CompletionRequest r = request(kPrompts[static_cast<size_t>(i % 3)], 40, 0.9f, 1000 + static_cast<uint64_t>(i % 6));
    r.sampling.repeat_penalty = 1.1f;  // penalties see prompt + generated, as in generate()
    reqs.push_back(r);
    c.submit(sched, i, r);
  }
  c.wait(8);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    expect_same_as_alone(c.get(i), reqs[static_cast<size_t>(i)], opt.n_ctx);
  }
  EXPECT_EQ(c.get(0).tokens, c.get(6).tokens);  // same prompt, same seed
}

TEST(Scheduler, FullPoolMakesRequestsWaitAndPreemptsWithoutChangingOutputs) {
  SchedulerOptions opt;
  opt.n_ctx = 64;
  opt.n_threads = 2;
  opt.block_size = 8;
  opt.kv_blocks = 6;  // 48 positions; each request grows to ~40
  Scheduler sched(stories(), tokenizer(), opt);
  Collector c;
  int max_queued = 0;
  std::mutex mu;
  std::vector<CompletionRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    CompletionRequest r = request(kPrompts[static_cast<size_t>(i + 4)], 30);
    r.ignore_eos = true;
    reqs.push_back(r);
    c.submit(sched, i, r, [&](const TokenEvent&) {
      const int queued = sched.stats().queued;  // callbacks may call stats()
      std::lock_guard<std::mutex> lock(mu);
      max_queued = std::max(max_queued, queued);
      return true;
    });
  }
  c.wait(4);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    expect_same_as_alone(c.get(i), reqs[static_cast<size_t>(i)], opt.n_ctx);
  }
  EXPECT_GT(max_queued, 0);
  const SchedulerStats st = wait_idle(sched);
  EXPECT_GT(st.preemptions, 0u);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.kv_blocks_total, 6);
}

TEST(Scheduler, ChunkedPrefillMixedWithDecodesEqualsAlone) {
  SchedulerOptions opt;
  opt.n_ctx = 128;
  opt.n_threads = 2;
  opt.block_size = 8;
  opt.max_running = 4;
  opt.max_batch_tokens = 12;  // long prompts take several steps, beside other sequences' decode tokens
  Scheduler sched(stories(), tokenizer(), opt);
  Collector c;
  const std::vector<std::string> prompts = {
      "Once upon a time, there was a little girl named Lily. She loved to play outside.",
      "Tom",
      "One day, a big dog came to the park. The dog was very happy and wanted to play with the kids.",
      "The sun was shining and the birds were singing in the tall green trees by the river."};
  std::vector<CompletionRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs.push_back(request(prompts[i], 16));
    ASSERT_TRUE(i == 1 || reqs.back().prompt_tokens.size() > 12u);
    c.submit(sched, static_cast<int>(i), reqs.back());
  }
  c.wait(static_cast<int>(reqs.size()));
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    expect_same_as_alone(c.get(static_cast<int>(i)), reqs[i], opt.n_ctx);
  }
}

TEST(Scheduler, SequenceLargerThanThePoolEndsWithLengthLikeAFullContext) {
  SchedulerOptions opt;
  opt.n_ctx = 256;
  opt.n_threads = 1;
  opt.block_size = 8;
  opt.kv_blocks = 2;  // 16 positions: the same limit as a context of 16
  Scheduler sched(stories(), tokenizer(), opt);
  Collector c;
  CompletionRequest r = request("Tom and Lily went to the park", 100);
  r.ignore_eos = true;
  c.submit(sched, 0, r);
  c.wait(1);
  expect_same_as_alone(c.get(0), r, 16);
  EXPECT_EQ(c.get(0).result.finish, FinishReason::Length);
}

TEST(Scheduler, CancellationFreesBlocks) {
  SchedulerOptions opt;
  opt.n_ctx = 256;
  opt.n_threads = 1;
  Scheduler sched(stories(), tokenizer(), opt);
  const SchedulerStats baseline = sched.stats();
  Collector c;
  std::mutex mu;
  std::condition_variable cv;
  bool first_token = false, cancelled = false;
  CompletionRequest r = request("Once upon a time", 200);
  r.ignore_eos = true;
  const uint64_t id = c.submit(sched, 0, r, [&](const TokenEvent&) {
    std::unique_lock<std::mutex> lock(mu);
    first_token = true;
    cv.notify_all();
    cv.wait(lock, [&] { return cancelled; });  // hold the scheduler until cancel() has been called
    return true;
  });
  // A callback that returns false cancels its own request.
  int seen = 0;
  c.submit(sched, 1, request("The little dog", 200), [&seen](const TokenEvent&) { return ++seen < 3; });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return first_token; });
  }
  sched.cancel(id);
  sched.cancel(id + 1000);  // unknown ids are ignored
  {
    std::lock_guard<std::mutex> lock(mu);
    cancelled = true;
    cv.notify_all();
  }
  c.wait(2);
  const Outcome a = c.get(0), b = c.get(1);
  EXPECT_EQ(a.result.finish, FinishReason::Cancelled);
  EXPECT_LT(a.result.completion_tokens, 200);
  EXPECT_EQ(b.result.finish, FinishReason::Cancelled);
  EXPECT_EQ(b.result.completion_tokens, 3);
  EXPECT_EQ(a.done_calls, 1);
  EXPECT_EQ(b.done_calls, 1);
  const SchedulerStats st = wait_idle(sched);
  EXPECT_EQ(st.kv_blocks_used, baseline.kv_blocks_used);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.requests_cancelled, 2u);
  sched.cancel(id);  // already finished: no-op
}

TEST(Scheduler, QueueLimitGivesUnavailable) {
  SchedulerOptions opt;
  opt.n_ctx = 128;
  opt.n_threads = 1;
  opt.max_running = 1;
  opt.max_queued = 2;
  Scheduler sched(stories(), tokenizer(), opt);
  Collector c;
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, release = false;
  c.submit(sched, 0, request("Once upon a time", 5), [&](const TokenEvent&) {
    std::unique_lock<std::mutex> lock(mu);
    started = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return true;
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started; });  // request 0 runs; the scheduler waits in its callback
  }
  c.submit(sched, 1, request("The little dog", 5));
  c.submit(sched, 2, request("The king", 5));
  try {
    c.submit(sched, 3, request("Mom said", 5));
    ADD_FAILURE() << "a third queued request was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unavailable);
  }
  EXPECT_EQ(sched.stats().queued, 2);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
  }
  c.wait(3);
  for (int i = 0; i < 3; ++i) EXPECT_NE(c.get(i).result.finish, FinishReason::Cancelled);
}

TEST(Scheduler, SubmitValidatesRequests) {
  SchedulerOptions opt;
  opt.n_ctx = 32;
  opt.n_threads = 1;
  Scheduler sched(stories(), tokenizer(), opt);
  EXPECT_EQ(sched.n_ctx(), 32);
  const auto kind_of = [&](CompletionRequest r) {
    try {
      sched.submit(std::move(r), {}, {});
    } catch (const Error& e) {
      return e.kind();
    }
    ADD_FAILURE() << "accepted";
    return ErrorKind::Internal;
  };
  CompletionRequest too_long = request("Once", 4);
  too_long.prompt_tokens.assign(33, 300);
  EXPECT_EQ(kind_of(too_long), ErrorKind::OutOfRange);
  CompletionRequest r = request("Once", 4);
  r.prompt_tokens.clear();
  EXPECT_EQ(kind_of(r), ErrorKind::InvalidArgument);
  r = request("Once", 4);
  r.prompt_tokens.push_back(512);
  EXPECT_EQ(kind_of(r), ErrorKind::InvalidArgument);
  r = request("Once", 4);
  r.top_logprobs = 21;
  EXPECT_EQ(kind_of(r), ErrorKind::InvalidArgument);
  r = request("Once", 4);
  r.sampling.top_p = 2.0f;
  EXPECT_EQ(kind_of(r), ErrorKind::InvalidArgument);
  r = request("Once", 4);
  r.stop = {""};
  EXPECT_EQ(kind_of(r), ErrorKind::InvalidArgument);
  SchedulerOptions bad = opt;
  bad.max_batch_tokens = 4;  // < max_running
  EXPECT_THROW(Scheduler(stories(), tokenizer(), bad), Error);
}

TEST(Scheduler, SharedPrefixIsServedFromTheCache) {
  SchedulerOptions opt;
  opt.n_ctx = 256;
  opt.n_threads = 2;
  opt.block_size = 8;
  Scheduler sched(stories(), tokenizer(), opt);
  const std::string prefix =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she saw a big";
  Collector c;
  const CompletionRequest first = request(prefix + " dog", 12);
  c.submit(sched, 0, first);
  c.wait(1);
  EXPECT_EQ(c.get(0).result.cached_prompt_tokens, 0);
  EXPECT_GT(wait_idle(sched).kv_blocks_cached, 0);  // the prompt's full blocks outlive the request

  const CompletionRequest second = request(prefix + " red ball", 12);
  size_t common = 0;
  while (common < first.prompt_tokens.size() && common < second.prompt_tokens.size() &&
         first.prompt_tokens[common] == second.prompt_tokens[common]) {
    ++common;
  }
  ASSERT_GE(common, 24u);
  c.submit(sched, 1, second);
  c.wait(2);
  EXPECT_EQ(c.get(1).result.cached_prompt_tokens, static_cast<int64_t>(common / 8 * 8));
  expect_same_as_alone(c.get(0), first, opt.n_ctx);
  expect_same_as_alone(c.get(1), second, opt.n_ctx);

  // The identical prompt again: everything but the last (partial or recomputed) block is cached.
  c.submit(sched, 2, first);
  c.wait(3);
  EXPECT_EQ(c.get(2).result.cached_prompt_tokens, static_cast<int64_t>((first.prompt_tokens.size() - 1) / 8 * 8));
  EXPECT_EQ(c.get(2).tokens, c.get(0).tokens);
}

// Housekeeping on the scheduler's thread: a cached prefix idle for longer than the limit is freed and a
// later identical prompt recomputes it; a younger one survives a housekeeping with a long limit.
TEST(Scheduler, HousekeepingFreesCachedPrefixesUnusedForAWhile) {
  SchedulerOptions opt;
  opt.n_ctx = 128;
  opt.n_threads = 2;
  opt.block_size = 8;
  Scheduler sched(stories(), tokenizer(), opt);
  const CompletionRequest r = request("Once upon a time, there was a little girl named Lily. She loved to play", 4);
  Collector c;
  c.submit(sched, 0, r);
  c.wait(1);
  const int64_t cached = wait_idle(sched).kv_blocks_cached;
  ASSERT_GT(cached, 0);

  HousekeepingOptions keep;
  keep.cached_idle_seconds = 3600;  // nothing is an hour old
  const HousekeepingResult kept = sched.housekeep(keep);
  EXPECT_EQ(kept.cached_blocks_before, cached);
  EXPECT_EQ(kept.cached_blocks_freed, 0);
  EXPECT_EQ(sched.stats().kv_blocks_cached, cached);

  HousekeepingOptions all;
  all.cached_idle_seconds = 0;
  const HousekeepingResult freed = sched.housekeep(all);
  EXPECT_EQ(freed.cached_blocks_freed, cached);
  EXPECT_EQ(freed.free_blocks_after, sched.stats().kv_blocks_total);
  EXPECT_EQ(freed.running, 0);
  EXPECT_FALSE(freed.recurrent_state);
  const SchedulerStats after = sched.stats();
  EXPECT_EQ(after.kv_blocks_cached, 0);
  EXPECT_EQ(after.kv_blocks_used, 0);

  c.submit(sched, 1, r);  // the same prompt: nothing left to reuse, and the same tokens
  c.wait(2);
  EXPECT_EQ(c.get(1).result.cached_prompt_tokens, 0);
  EXPECT_EQ(c.get(1).tokens, c.get(0).tokens);

  HousekeepingOptions bad;
  bad.cached_idle_seconds = -1;
  EXPECT_THROW(sched.housekeep(bad), Error);
}

// idle(): false from a submit until its on_done has run, and for a short window after expect_request();
// wait_until_idle() returns as soon as it is true again.
TEST(Scheduler, IdleMeansNothingQueuedRunningOrAnnounced) {
  SchedulerOptions opt;
  opt.n_ctx = 64;
  opt.n_threads = 1;
  Scheduler sched(stories(), tokenizer(), opt);
  EXPECT_TRUE(sched.idle());
  std::atomic<bool> idle_seen_in_callback{false};
  Collector c;
  c.submit(sched, 0, request("Once upon a time", 8), [&](const TokenEvent&) {
    if (sched.idle()) idle_seen_in_callback = true;
    return true;
  });
  ASSERT_TRUE(sched.wait_until_idle(std::chrono::seconds(30)));
  EXPECT_EQ(c.get(0).done_calls, 1);  // idle only once on_done has run
  EXPECT_FALSE(idle_seen_in_callback.load());  // busy while it generated
  sched.expect_request();
  EXPECT_FALSE(sched.idle());  // a request's head arrived: its submit is coming
  EXPECT_TRUE(sched.wait_until_idle(std::chrono::seconds(5)));  // none came: the window ends
}

TEST(Scheduler, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  SchedulerOptions opt;
  opt.n_ctx = 64;
  opt.n_threads = 1;
  Scheduler sched(stories(), tokenizer(), opt);
  Collector c;
  CompletionRequest r = request("The little dog", 8, 0.7f, 7);  // sampled: logprobs ignore temperature
  r.logprobs = true;
  r.top_logprobs = 5;
  c.submit(sched, 0, r);
  c.wait(1);
  const Outcome got = c.get(0);
  ASSERT_FALSE(got.tokens.empty());

  SessionOptions so;
  so.n_ctx = 64;
  so.n_threads = 1;
  Session session(stories(), so);
  std::vector<float> logits = session.eval(r.prompt_tokens);
  size_t step = 0;
  for (const TokenEvent& e : got.events) {
    if (e.token < 0) continue;
    SCOPED_TRACE(step);
    double mx = -INFINITY, sum = 0;
    for (float l : logits) mx = std::max(mx, static_cast<double>(l));
    for (float l : logits) sum += std::exp(l - mx);
    const auto ref = [&](int32_t id) { return logits[static_cast<size_t>(id)] - mx - std::log(sum); };
    EXPECT_EQ(e.chosen.token, e.token);
    EXPECT_EQ(e.chosen.text, tokenizer().token_to_piece(e.token));
    EXPECT_NEAR(e.chosen.logprob, ref(e.token), 1e-4);
    ASSERT_EQ(e.top.size(), 5u);
    std::vector<int32_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(e.top[k].token, order[k]);
      EXPECT_NEAR(e.top[k].logprob, ref(order[k]), 1e-4);
    }
    const int32_t next[1] = {e.token};
    logits = session.eval(next);
    ++step;
  }
}

TEST(Scheduler, DestructorCancelsPendingRequestsOnce) {
  Collector c;
  {
    SchedulerOptions opt;
    opt.n_ctx = 512;
    opt.n_threads = 1;
    opt.max_running = 1;
    Scheduler sched(stories(), tokenizer(), opt);
    for (int i = 0; i < 3; ++i) {
      CompletionRequest r = request(kPrompts[static_cast<size_t>(i)], -1);
      r.ignore_eos = true;
      c.submit(sched, i, r);
    }
  }
  c.wait(3);
  int cancelled = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.get(i).done_calls, 1);
    cancelled += c.get(i).result.finish == FinishReason::Cancelled;
  }
  EXPECT_GE(cancelled, 2);
}

// expect_request() opens a busy-wait window (poll_us): requests submitted inside it, after it ended, or
// without any hint are served the same; a stop during the window ends the loop at once (not at its end);
// -1 is automatic (0 on the CPU) and anything below is refused.
TEST(Scheduler, BusyWaitAfterExpectRequestChangesNothingButTiming) {
  SchedulerOptions opt;
  opt.n_ctx = 96;
  opt.n_threads = 1;
  opt.max_running = 2;
  opt.poll_us = -2;
  EXPECT_THROW(Scheduler(stories(), tokenizer(), opt), Error);
  for (const int64_t poll_us : {int64_t{-1}, int64_t{0}, int64_t{1000}, int64_t{2000000}}) {
    SCOPED_TRACE(poll_us);
    opt.poll_us = poll_us;
    auto sched = std::make_unique<Scheduler>(stories(), tokenizer(), opt);
    Collector c;
    std::vector<CompletionRequest> reqs;
    for (int i = 0; i < 3; ++i) {
      CompletionRequest r = request(kPrompts[static_cast<size_t>(i)], 12);
      r.ignore_eos = true;
      reqs.push_back(r);
      if (i == 0) sched->expect_request();  // submitted inside the window
      if (i == 1) {                          // after a 1 ms window ended (inside the 2 s one)
        sched->expect_request();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      c.submit(*sched, i, r);  // i == 2: no hint
      c.wait(i + 1);
    }
    for (int i = 0; i < 3; ++i) expect_same_as_alone(c.get(i), reqs[static_cast<size_t>(i)], opt.n_ctx);
    EXPECT_EQ(wait_idle(*sched).kv_blocks_used, 0);
    sched->expect_request();  // a hint with no request: the destructor must not wait for the window's end
    const auto t0 = std::chrono::steady_clock::now();
    sched.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
  }
}

TEST(Scheduler, PicksItsDeviceOnce) {
  SchedulerOptions opt;
  opt.n_ctx = 64;
  opt.n_threads = 1;
  opt.max_running = 2;
  opt.device = "tpu";
  EXPECT_THROW(Scheduler(stories(), tokenizer(), opt), Error);
  opt.device = "cuda:x";
  EXPECT_THROW(Scheduler(stories(), tokenizer(), opt), Error);
  opt.device = "auto";  // the GPU when there is one, else the CPU: either way it serves
  {
    Scheduler sched(stories(), tokenizer(), opt);
    EXPECT_EQ(sched.stats().device, cuda_device_count() > 0 ? "cuda:0" : "cpu");
    Collector c;
    CompletionRequest r = request("Once upon a time", 8);
    r.ignore_eos = true;
    c.submit(sched, 0, r);
    c.wait(1);
    EXPECT_EQ(c.get(0).tokens.size(), 8u);
  }
  if (cuda_device_count() == 0) {  // no GPU (or no CUDA in this build): "cuda" is a clear Unsupported
    opt.device = "cuda";
    try {
      Scheduler sched(stories(), tokenizer(), opt);
      ADD_FAILURE() << "device cuda accepted without a GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    }
  }
}

}  // namespace
}  // namespace ga
