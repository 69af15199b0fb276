// stories260K greedy decoding against karpathy/llama2.c run.c (an independent float32
// implementation): feeding each case's prompt ids (one batch) and then the argmax at every step must
// reproduce run.c's token ids exactly. The reference file's description defines the protocol:
// token_ids = prompt ids + generated ids, one per position up to `steps` positions. The same again with the
// sequence's positions sharded over CPU ranks (SessionOptions::context_parallel: ring-attention prefill,
// pass-Q decode), which must give the same tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"

namespace {

int32_t argmax(const std::vector<float>& logits) {  // lowest id wins ties, as run.c's argmax
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

void expect_run_c_tokens(int context_parallel) {
  const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  const nlohmann::json ref = nlohmann::json::parse(
      ga::test::read_file(ga::test::shared_path("models/tinyllamas/stories260K.greedy-reference.json")));
  ASSERT_GE(ref.at("cases").size(), 4u);
  for (const nlohmann::json& c : ref.at("cases")) {
    SCOPED_TRACE("prompt '" + c.at("prompt").get<std::string>() + "'");
    const std::vector<int32_t> prompt = c.at("prompt_token_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> want = c.at("token_ids").get<std::vector<int32_t>>();
    ASSERT_GT(want.size(), prompt.size());
    ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), want.begin()));

    ga::SessionOptions options;
    options.n_ctx = 256;
    options.n_threads = 1;
    options.context_parallel = context_parallel;
    ga::Session session(model, options);
    std::vector<int32_t> got = prompt;
    std::vector<float> logits = session.eval(prompt);
    while (got.size() < want.size()) {
      const int32_t next = argmax(logits);
      got.push_back(next);
      if (got.size() < want.size()) logits = session.eval(std::span<const int32_t>(&next, 1));
    }
    EXPECT_EQ(got, want);
  }
}

TEST(SessionGreedy, Stories260KReproducesLlama2cRunC) { expect_run_c_tokens(1); }

TEST(SessionGreedy, ContextParallelRanksReproduceLlama2cRunC) {
  for (const int ranks : {2, 3}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    expect_run_c_tokens(ranks);
  }
}

}  // namespace
