// SteppedGeneration (the host assistant's loop, one bounded step at a time) against ga::generate: the same
// tokens, text and finish reason for greedy and seeded sampling, stop strings, max_tokens and a full
// context, on stories260K (SPM) and an RWKV model (a recurrent state, byte vocabulary); and its step
// accounting (ceil(prompt / chunk) prefill steps, then one per token).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/stories_scheduler.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/generate.h"
#include "runtime/engine/stepped_generation.h"

namespace ga::engine {
namespace {

const LoadedModel& rwkv() {
  static const LoadedModel model = load_model(test::shared_path("models/rwkv-tiny/tiny-rwkv-5v2-730K-FP32.bin"));
  return model;
}

struct Stepped {
  std::string streamed;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Length;
  int64_t steps = 0;
};

Stepped run_stepped(const LoadedModel& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                    const GenerateOptions& o, int64_t chunk, int64_t n_ctx) {
  SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 1;
  Session session(model, so);
  SteppedGeneration gen(session, tok, prompt, o, chunk);
  Stepped out;
  while (!gen.finished()) out.streamed += gen.step();
  out.tokens = gen.tokens();
  out.finish = gen.finish();
  out.steps = gen.steps();
  EXPECT_EQ(gen.text(), out.streamed);
  return out;
}

GenerateResult run_whole(const LoadedModel& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                         const GenerateOptions& o, int64_t n_ctx) {
  SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 1;
  Session session(model, so);
  return generate_from_tokens(session, tok, prompt, o);
}

void expect_same(const LoadedModel& model, const Tokenizer& tok, const std::string& text, const GenerateOptions& o,
                 int64_t chunk, int64_t n_ctx = 256) {
  const std::vector<int32_t> prompt = tok.encode(text, true);
  const GenerateResult want = run_whole(model, tok, prompt, o, n_ctx);
  const Stepped got = run_stepped(model, tok, prompt, o, chunk, n_ctx);
  EXPECT_EQ(got.tokens, want.tokens) << text;
  EXPECT_EQ(got.streamed, want.text) << text;
  EXPECT_STREQ(finish_reason_name(got.finish), finish_reason_name(want.finish)) << text;
  const int64_t prefill_steps = (static_cast<int64_t>(prompt.size()) + chunk - 1) / chunk;
  // one step per sampled token (the EOS or stop token's too), none after max_tokens
  EXPECT_GE(got.steps, prefill_steps + static_cast<int64_t>(want.tokens.size()));
  EXPECT_LE(got.steps, prefill_steps + static_cast<int64_t>(want.tokens.size()) + 1);
}

TEST(SteppedGeneration, EqualsGenerateOnStories) {
  GenerateOptions greedy;
  greedy.max_tokens = 40;
  greedy.sampling.temperature = 0.0f;
  expect_same(test::stories(), test::tokenizer(), "Once upon a time, there was a little girl named Lily", greedy, 4);
  expect_same(test::stories(), test::tokenizer(), "The little dog", greedy, 1);
  expect_same(test::stories(), test::tokenizer(), "The little dog", greedy, 64);
  GenerateOptions seeded = greedy;
  seeded.sampling.temperature = 0.8f;
  seeded.sampling.seed = 1234;
  seeded.stop = {"."};
  expect_same(test::stories(), test::tokenizer(), "Tom and Lily went to the park", seeded, 3);
  GenerateOptions full = greedy;
  full.max_tokens = -1;
  full.ignore_eos = true;
  expect_same(test::stories(), test::tokenizer(), "The sun was shining", full, 5, 48);  // runs to the full context
  GenerateOptions none = greedy;
  none.max_tokens = 0;
  expect_same(test::stories(), test::tokenizer(), "The bird flew", none, 2);
}

TEST(SteppedGeneration, EqualsGenerateOnRwkv) {
  const Tokenizer tok(rwkv().vocab);
  GenerateOptions greedy;
  greedy.max_tokens = 48;
  greedy.sampling.temperature = 0.0f;
  expect_same(rwkv(), tok, "The host watches the server and answers questions.", greedy, 7);
  GenerateOptions seeded = greedy;
  seeded.sampling.temperature = 1.0f;
  seeded.sampling.seed = 99;
  seeded.stop = {"e"};
  expect_same(rwkv(), tok, "Question: how busy is the GPU?\nAnswer:", seeded, 16);
}

TEST(SteppedGeneration, RefusesBadInputBeforeAnyWork) {
  Session session(test::stories(), SessionOptions{.n_ctx = 16, .n_threads = 1});
  GenerateOptions o;
  EXPECT_THROW(SteppedGeneration(session, test::tokenizer(), {}, o), Error);
  EXPECT_THROW(SteppedGeneration(session, test::tokenizer(), std::vector<int32_t>(17, 1), o), Error);
  EXPECT_THROW(SteppedGeneration(session, test::tokenizer(), {1, 2}, o, 0), Error);
  SteppedGeneration gen(session, test::tokenizer(), {1, 2}, o);
  gen.cancel();
  EXPECT_TRUE(gen.finished());
  EXPECT_EQ(gen.finish(), FinishReason::Cancelled);
  EXPECT_THROW(gen.step(), Error);
  EXPECT_EQ(session.n_past(), 0);  // nothing ran
}

}  // namespace
}  // namespace ga::engine
