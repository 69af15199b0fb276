// What the Scheduler tests of recurrent models on the CPU (tests/runtime/test_rwkv.cpp) and on the GPU
// (tests/cuda/test_cuda_rwkv.cpp) share: greedy requests submitted in waves, their streamed tokens collected, and
// the same prompt generated alone by a CPU Session as the reference. Header-only (the model and the scheduler are
// not in ga_test_common).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gpu_accel/generate.h"
#include "gpu_accel/scheduler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"

namespace ga::test {

// Submits a greedy request of max_tokens per prompt, `wave` at a time: after every wave-th submission it waits
// until all submitted so far have finished (so a later wave's sequences take over the finished ones' blocks or
// state slots). Every request must end without an error. Returns each request's streamed tokens.
inline std::vector<std::vector<int32_t>> run_greedy_requests(Scheduler& sched, const Tokenizer& tok,
                                                            const std::vector<std::string>& prompts, int max_tokens,
                                                            size_t wave) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> got(prompts.size());
  size_t done = 0;
  const auto wait_for = [&](size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done >= n; })) << "requests did not finish";
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    CompletionRequest r;
    r.prompt_tokens = tok.encode(prompts[i], false);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    sched.submit(
        std::move(r),
        [&, i](const TokenEvent& e) {
          std::lock_guard<std::mutex> lock(mu);
          if (e.token >= 0) got[i].push_back(e.token);
          return true;
        },
        [&](const CompletionResult&, std::exception_ptr error) {
          EXPECT_FALSE(error) << "a request ended with an error";
          std::lock_guard<std::mutex> lock(mu);
          ++done;
          cv.notify_all();
        });
    if (wave > 0 && (i + 1) % wave == 0) wait_for(i + 1);
  }
  wait_for(prompts.size());
  return got;
}

// The same greedy generation by a CPU Session of n_ctx positions, alone.
inline std::vector<int32_t> greedy_alone(const LoadedModel& model, const Tokenizer& tok, const std::string& prompt,
                                         int max_tokens, int64_t n_ctx) {
  SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 1;
  Session session(model, so);
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = 0.0f;
  return generate_from_tokens(session, tok, tok.encode(prompt, false), o).tokens;
}

}  // namespace ga::test
