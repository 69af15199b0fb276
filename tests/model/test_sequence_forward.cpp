// SequenceForward details the Session cannot reach: splitting a long eval into max_batch steps must
// give the same logits as one step (the reference is the unsplit evaluation, itself checked against
// llama.cpp and numpy in test_fixture_logits.cpp), and bad construction parameters are rejected.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_data.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"

namespace {

TEST(SequenceForward, SplittingIntoStepsKeepsLogits) {
  const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("fixtures/quant/fixture-Q8_0.gguf"));
  const std::vector<int32_t> tokens = {1, 274, 287, 269, 317, 263, 377, 267, 265, 282, 295, 433, 426};
  const size_t n_vocab = static_cast<size_t>(model.config.n_vocab);
  ga::ThreadPool pool(2);
  const auto run = [&](int64_t max_batch, bool all) {
    ga::arch::SequenceParams params;
    params.n_ctx = 32;
    params.max_batch = max_batch;
    ga::arch::SequenceForward forward(model, params, &pool);
    std::vector<float> logits((all ? tokens.size() : 1) * n_vocab);
    forward.eval(tokens, 0, all, logits.data());
    return logits;
  };
  const std::vector<float> whole = run(512, true);
  const std::vector<float> split = run(4, true);  // steps of 4, 4, 4, 1
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_LE(ga::test::rel_l2(split.data() + i * n_vocab, whole.data() + i * n_vocab, n_vocab), 1e-5) << i;
  }
  const std::vector<float> split_last = run(5, false);
  EXPECT_LE(ga::test::rel_l2(split_last.data(), whole.data() + (tokens.size() - 1) * n_vocab, n_vocab), 1e-5);
}

TEST(SequenceForward, RejectsBadParameters) {
  const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  ga::arch::SequenceParams params;
  params.n_ctx = 0;
  EXPECT_THROW(ga::arch::SequenceForward(model, params, nullptr), ga::Error);
  params.n_ctx = 8;
  params.kv_type = ga::DType::Q8_0;
  EXPECT_THROW(ga::arch::SequenceForward(model, params, nullptr), ga::Error);
  params.kv_type = ga::DType::F32;
  ga::arch::SequenceForward forward(model, params, nullptr);
  std::vector<float> logits(512);
  const std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_THROW(forward.eval(tokens, 6, false, logits.data()), ga::Error);  // 6 + 3 > 8
  EXPECT_THROW(forward.eval(tokens, -1, false, logits.data()), ga::Error);
}

}  // namespace
