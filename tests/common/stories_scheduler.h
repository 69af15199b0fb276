// What the Scheduler's tests on the CPU (tests/runtime/test_scheduler.cpp) and on the GPU
// (tests/cuda/test_cuda_scheduler.cpp) share: the stories260K model and its tokenizer (loaded once per
// process), the 16 prompts of the concurrent-request tests with the request each prompt becomes (lengths,
// stop strings and a run to the full context varied by index), and the wait for the scheduler to go idle.
// Header-only: ga_test_common links ga_core alone, and these need the model and the scheduler.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/scheduler.h"

namespace ga::test {

inline const LoadedModel& stories() {
  static const LoadedModel model = load_gguf_model(shared_path("models/tinyllamas/stories260K.gguf"));
  return model;
}

inline const Tokenizer& tokenizer() {
  static const Tokenizer tok(stories().vocab);
  return tok;
}

inline const std::vector<std::string> kStoryPrompts = {
    "Once upon a time",       "The little dog",        "Tom and Lily went to the park", "One day, a girl named Sue",
    "The sun was shining",    "There was a big tree",  "Sam had a red ball",            "A cat sat on the mat",
    "Mom said",               "The bird flew",         "Lily wanted to play",           "Ben and his dad",
    "It was a rainy day",     "The king",              "A small boy found a box",       "In the forest"};

// The greedy request of the concurrent tests for prompt i: max_tokens 20 + 3i, every fifth one running
// until the context is full (max_tokens -1, EOS ignored), every fourth from the second on stopping at ".".
inline CompletionRequest concurrent_greedy_request(size_t i) {
  CompletionRequest r;
  r.prompt_tokens = tokenizer().encode(kStoryPrompts[i], true);
  r.max_tokens = i % 5 == 4 ? -1 : 20 + 3 * static_cast<int64_t>(i);
  r.sampling.temperature = 0.0f;
  if (i % 4 == 1) r.stop = {"."};       // stop strings
  if (i % 5 == 4) r.ignore_eos = true;  // runs until the context is full
  return r;
}

// The scheduler's stats once nothing runs or waits (a failure after ~10 s of waiting).
inline SchedulerStats wait_idle(const Scheduler& s) {
  for (int i = 0; i < 2000; ++i) {
    const SchedulerStats st = s.stats();
    if (st.running == 0 && st.queued == 0) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "the scheduler did not become idle";
  return s.stats();
}

}  // namespace ga::test
