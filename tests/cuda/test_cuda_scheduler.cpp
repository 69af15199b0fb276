// The continuous-batching Scheduler on the GPU (device "cuda": the batched CUDA forward over a
// paged f16 KV pool on the device) against itself and against the CPU Scheduler.
//
// Greedy outputs of 16 concurrent requests (prompt lengths 2..11 tokens, different max_tokens, stop
// strings, one that runs to the full context) must equal (a) each request run alone on the same
// GPU scheduler, and (b) the CPU scheduler's with an f16 KV cache (the independent reference: the
// CPU forward is the one every GPU op is tested against; stories260K's greedy output is identical
// on both, test_cuda_forward.cpp). A small pool forces waiting and preemption on the GPU too, and
// the outputs must not change. Blocks are all returned at the end.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/test_data.h"
#include "cuda/cuda_harness.h"
#include "gpu_accel/error.h"
#include "gpu_accel/scheduler.h"

namespace ga {
namespace {

const LoadedModel& stories() {
  static const LoadedModel model = load_gguf_model(test::shared_path("models/tinyllamas/stories260K.gguf"));
  return model;
}

const Tokenizer& tokenizer() {
  static const Tokenizer tok(stories().vocab);
  return tok;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string streamed;
  CompletionResult result;
  bool error = false;
};

// Submits all requests at once and waits for all of them.
std::vector<Outcome> run_all(Scheduler& sched, const std::vector<CompletionRequest>& reqs) {
  std::vector<Outcome> out(reqs.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    sched.submit(
        reqs[i],
        [&, i](const TokenEvent& e) {
          std::lock_guard<std::mutex> lock(mu);
          if (e.token >= 0) out[i].tokens.push_back(e.token);
          out[i].streamed += e.text;
          return true;
        },
        [&, i](const CompletionResult& r, std::exception_ptr error) {
          std::lock_guard<std::mutex> lock(mu);
          out[i].result = r;
          out[i].error = error != nullptr;
          ++done;
          cv.notify_all();
        });
  }
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == reqs.size(); }))
      << done << " of " << reqs.size() << " finished";
  return out;
}

SchedulerStats wait_idle(const Scheduler& s) {
  for (int i = 0; i < 2000; ++i) {
    const SchedulerStats st = s.stats();
    if (st.running == 0 && st.queued == 0) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "the scheduler did not become idle";
  return s.stats();
}

const std::vector<std::string> kPrompts = {
    "Once upon a time",       "The little dog",        "Tom and Lily went to the park", "One day, a girl named Sue",
    "The sun was shining",    "There was a big tree",  "Sam had a red ball",            "A cat sat on the mat",
    "Mom said",               "The bird flew",         "Lily wanted to play",           "Ben and his dad",
    "It was a rainy day",     "The king",              "A small boy found a box",       "In the forest"};

std::vector<CompletionRequest> requests() {
  std::vector<CompletionRequest> reqs;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    CompletionRequest r;
    r.prompt_tokens = tokenizer().encode(kPrompts[i], true);
    r.max_tokens = i % 5 == 4 ? -1 : 20 + 3 * static_cast<int64_t>(i);
    r.sampling.temperature = 0.0f;
    if (i % 4 == 1) r.stop = {"."};
    if (i % 5 == 4) r.ignore_eos = true;  // runs until the context is full
    reqs.push_back(r);
  }
  return reqs;
}

SchedulerOptions options(const std::string& device) {
  SchedulerOptions o;
  o.n_ctx = 96;
  o.n_threads = 2;
  o.max_running = 16;
  o.kv_type = KvType::F16;
  o.device = device;
  return o;
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_FALSE(got.error) << what;
  EXPECT_FALSE(want.error) << what;
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.result.text, want.result.text) << what;
  EXPECT_EQ(got.streamed, want.streamed) << what;
  EXPECT_EQ(got.result.finish, want.result.finish) << what;
  EXPECT_GT(got.tokens.size(), 0u) << what;
}

TEST(CudaScheduler, SixteenConcurrentGreedyRequestsEqualEachAloneAndTheCpuScheduler) {
  GA_REQUIRE_CUDA_DEVICE();
  const std::vector<CompletionRequest> reqs = requests();
  std::vector<Outcome> cpu;
  {
    Scheduler sched(stories(), tokenizer(), options("cpu"));
    cpu = run_all(sched, reqs);
  }
  Scheduler gpu(stories(), tokenizer(), options("cuda"));
  EXPECT_EQ(gpu.stats().device, "cuda:0");
  const std::vector<Outcome> together = run_all(gpu, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<Outcome> alone = run_all(gpu, {reqs[i]});
    expect_same(together[i], alone[0], "alone: " + kPrompts[i]);
    expect_same(together[i], cpu[i], "cpu: " + kPrompts[i]);
  }
  const SchedulerStats st = wait_idle(gpu);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.requests_finished, 2 * reqs.size());
  EXPECT_GT(st.generated_tokens_total, 0u);
}

TEST(CudaScheduler, SmallPoolPreemptsWithoutChangingOutputs) {
  GA_REQUIRE_CUDA_DEVICE();
  const std::vector<CompletionRequest> reqs = requests();
  std::vector<Outcome> roomy;
  {
    Scheduler sched(stories(), tokenizer(), options("cuda"));
    roomy = run_all(sched, reqs);
  }
  SchedulerOptions o = options("cuda");
  o.kv_blocks = 14;  // 224 positions for 16 sequences of up to 96
  Scheduler tight(stories(), tokenizer(), o);
  const std::vector<Outcome> got = run_all(tight, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) expect_same(got[i], roomy[i], "tight pool: " + kPrompts[i]);
  const SchedulerStats st = wait_idle(tight);
  EXPECT_EQ(st.kv_blocks_total, 14);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_GT(st.preemptions, 0u);
}

}  // namespace
}  // namespace ga
