// Session behaviour on real models: batched prefill equals token-by-token evaluation, thread count
// does not change results beyond float32 summation order, truncate() rolls back exactly, and bad
// input (context overflow, token ids outside the vocabulary) is rejected before any work, leaving
// the session usable. The reference for each check is an independent evaluation of the same
// tokens in a fresh session (the logits themselves are checked against llama.cpp and numpy in
// tests/model/test_fixture_logits.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"

namespace {

const ga::LoadedModel& stories() {
  static const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  return model;
}

const ga::LoadedModel& fixture_q4k() {
  static const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("fixtures/quant/fixture-Q4_K.gguf"));
  return model;
}

// "Tom and Lily went to the park" as run.c tokenizes it, then the first 4 ids run.c generated
// (stories260K.greedy-reference.json): a natural 16-token sequence.
const std::vector<int32_t> kTokens = {1, 274, 287, 269, 317, 263, 377, 267, 265, 282, 295, 433, 426, 342, 394, 261};

ga::Session make_session(const ga::LoadedModel& model, int threads, int64_t n_ctx = 64,
                         ga::KvType kv = ga::KvType::F32) {
  ga::SessionOptions o;
  o.n_threads = threads;
  o.n_ctx = n_ctx;
  o.kv_type = kv;
  return ga::Session(model, o);
}

double row_rel(const std::vector<float>& a, size_t a_row, const std::vector<float>& b, size_t b_row, size_t n) {
  return ga::test::rel_l2(a.data() + a_row * n, b.data() + b_row * n, n);
}

TEST(Session, BatchedPrefillEqualsOneByOne) {
  for (const ga::LoadedModel* model : {&stories(), &fixture_q4k()}) {
    for (ga::KvType kv : {ga::KvType::F32, ga::KvType::F16}) {
      SCOPED_TRACE(model->config.name + (kv == ga::KvType::F16 ? " F16 KV" : " F32 KV"));
      const size_t n_vocab = static_cast<size_t>(model->config.n_vocab);
      ga::Session batched = make_session(*model, 1, 64, kv);
      const std::vector<float> all = batched.eval(kTokens, /*all_logits=*/true);
      ASSERT_EQ(all.size(), kTokens.size() * n_vocab);
      EXPECT_EQ(batched.n_past(), static_cast<int64_t>(kTokens.size()));

      // F32 KV: only float32 summation order differs between the batched and single-token matmuls.
      // F16 KV: such a difference can flip the f16 rounding of a cached element (one f16 ulp, ~1e-3
      // of that element), so the bound is the f16 precision instead.
      const double limit = kv == ga::KvType::F32 ? 1e-5 : 1e-3;
      ga::Session single = make_session(*model, 1, 64, kv);
      for (size_t i = 0; i < kTokens.size(); ++i) {
        const std::vector<float> row = single.eval(std::span<const int32_t>(&kTokens[i], 1));
        ASSERT_EQ(row.size(), n_vocab);
        EXPECT_LE(row_rel(row, 0, all, i, n_vocab), limit) << "position " << i;
      }
      // Without all_logits, eval returns the last token's row.
      ga::Session last_only = make_session(*model, 1, 64, kv);
      const std::vector<float> last = last_only.eval(kTokens);
      EXPECT_LE(row_rel(last, 0, all, kTokens.size() - 1, n_vocab), 1e-6);
    }
  }
}

TEST(Session, ThreadCountDoesNotChangeLogits) {
  for (const ga::LoadedModel* model : {&stories(), &fixture_q4k()}) {
    SCOPED_TRACE(model->config.name);
    const size_t n_vocab = static_cast<size_t>(model->config.n_vocab);
    ga::Session one = make_session(*model, 1);
    ga::Session two = make_session(*model, 2);
    EXPECT_EQ(one.n_threads(), 1);
    EXPECT_EQ(two.n_threads(), 2);
    const std::vector<float> a = one.eval(kTokens, true);
    const std::vector<float> b = two.eval(kTokens, true);
    for (size_t i = 0; i < kTokens.size(); ++i) EXPECT_LE(row_rel(a, i, b, i, n_vocab), 1e-5) << i;
    const int32_t next = 300;
    EXPECT_LE(row_rel(one.eval(std::span<const int32_t>(&next, 1)), 0, two.eval(std::span<const int32_t>(&next, 1)),
                      0, n_vocab),
              1e-5);
  }
}

TEST(Session, TruncateAndReEvalMatchesFreshSession) {
  const ga::LoadedModel& model = stories();
  const size_t n_vocab = static_cast<size_t>(model.config.n_vocab);
  const std::vector<int32_t> prefix(kTokens.begin(), kTokens.begin() + 6);
  const std::vector<int32_t> branch_a = {261, 376, 298};
  const std::vector<int32_t> branch_b = {300, 385};

  ga::Session s = make_session(model, 2);
  s.eval(prefix);
  s.eval(branch_a);
  EXPECT_EQ(s.n_past(), 9);
  s.truncate(6);
  EXPECT_EQ(s.n_past(), 6);
  const std::vector<float> got = s.eval(branch_b, true);

  ga::Session fresh = make_session(model, 2);
  fresh.eval(prefix);
  const std::vector<float> want = fresh.eval(branch_b, true);
  for (size_t i = 0; i < branch_b.size(); ++i) EXPECT_LE(row_rel(got, i, want, i, n_vocab), 1e-6) << i;

  s.reset();
  EXPECT_EQ(s.n_past(), 0);
  const std::vector<float> again = s.eval(prefix);
  const std::vector<float> first = make_session(model, 2).eval(prefix);
  EXPECT_LE(row_rel(again, 0, first, 0, n_vocab), 1e-6);

  EXPECT_THROW(s.truncate(7), ga::Error);  // beyond n_past
  EXPECT_THROW(s.truncate(-1), ga::Error);
}

// The warm-up evaluates throw-away tokens and forgets them: the session is empty after it, and what it
// computes next equals a session that never warmed up (the same thread count, so the same arithmetic).
TEST(Session, WarmUpLeavesNoTrace) {
  const ga::LoadedModel& model = stories();
  const size_t n_vocab = static_cast<size_t>(model.config.n_vocab);
  ga::Session warmed = make_session(model, 2);
  warmed.warm_up();
  EXPECT_EQ(warmed.n_past(), 0);
  const std::vector<float> got = warmed.eval(kTokens, true);
  const std::vector<float> want = make_session(model, 2).eval(kTokens, true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < kTokens.size(); ++i) EXPECT_EQ(row_rel(got, i, want, i, n_vocab), 0.0) << i;
  EXPECT_THROW(warmed.warm_up(), ga::Error);  // only on an empty session
}

TEST(Session, ContextOverflowThrowsOutOfRangeAndKeepsSessionUsable) {
  const ga::LoadedModel& model = stories();
  const size_t n_vocab = static_cast<size_t>(model.config.n_vocab);
  ga::Session s = make_session(model, 1, /*n_ctx=*/8);
  EXPECT_EQ(s.n_ctx(), 8);
  const std::vector<int32_t> six(kTokens.begin(), kTokens.begin() + 6);
  s.eval(six);
  const std::vector<int32_t> three = {261, 376, 298};
  try {
    s.eval(three);
    FAIL() << "expected OutOfRange";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::OutOfRange) << e.what();
  }
  EXPECT_EQ(s.n_past(), 6);  // nothing was evaluated
  const std::vector<int32_t> two = {261, 376};
  const std::vector<float> got = s.eval(two);
  EXPECT_EQ(s.n_past(), 8);

  ga::Session fresh = make_session(model, 1, 8);
  fresh.eval(six);
  EXPECT_LE(row_rel(got, 0, fresh.eval(two), 0, n_vocab), 1e-6);
  const int32_t one = 5;
  EXPECT_THROW(s.eval(std::span<const int32_t>(&one, 1)), ga::Error);  // full
}

TEST(Session, BadTokenIdsAreRejectedBeforeWork) {
  const ga::LoadedModel& model = stories();
  ga::Session s = make_session(model, 1);
  s.eval(std::vector<int32_t>{1, 400});
  for (int32_t bad : {-1, 512, 1 << 30}) {
    const std::vector<int32_t> tokens = {269, bad, 395};
    try {
      s.eval(tokens);
      FAIL() << "expected InvalidArgument for id " << bad;
    } catch (const ga::Error& e) {
      EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << e.what();
    }
    EXPECT_EQ(s.n_past(), 2);
  }
  EXPECT_THROW(s.eval(std::vector<int32_t>{}), ga::Error);
  EXPECT_EQ(s.n_past(), 2);
}

TEST(Session, DefaultContextIsTrainingContextCappedAt4096) {
  // stories260K.gguf says llama.context_length = 2048, the fixtures 512 (models/SOURCES.md, fixtures/README.md).
  EXPECT_EQ(ga::Session(stories()).n_ctx(), 2048);
  EXPECT_EQ(ga::Session(fixture_q4k()).n_ctx(), 512);
  ga::SessionOptions o;
  o.n_ctx = -1;
  EXPECT_THROW(ga::Session(stories(), o), ga::Error);
}

}  // namespace
