// stories260K greedy decoding against karpathy/llama2.c run.c (an independent float32
// implementation): feeding each case's prompt ids (one batch) and then the argmax at every step must
// reproduce run.c's token ids exactly. The reference file's description defines the protocol:
// token_ids = prompt ids + generated ids, one per position up to `steps` positions.
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

TEST(SessionGreedy, Stories260KReproducesLlama2cRunC) {
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

}  // namespace
