// Context parallelism on CPU ranks (the loopback transport, context_parallel.h): the sequence's positions are
// sharded over 2, 3 and 4 ranks, the prefill runs ring attention over the shards and decode the pass-Q merge,
// and every logit must equal the one-rank forward's within 1e-5 of their scale (float32 KV).
// The conversation: a prompt of 11 tokens (divides by none of 2, 3, 4), a 2-token eval (shorter than most
// rank counts: pass-Q with a causal pair), four decode steps, then a second prompt of 7 tokens over the
// sharded cache (a ring chunk whose queries also read the earlier shards). Models: stories260K, the F32 fixture,
// Gemma 2 (sliding window 8, soft-caps) and Gemma 3 (window 8, MQA, local/global layers) from tests/data/arch,
// Qwen3 (GQA 4/2, q/k norms), and every other family of tests/data/arch. Bad configurations and RWKV (a recurrent state) are refused with clear errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/context_parallel.h"
#include "model/arch/forward.h"
#include "model/tools/random_model.h"

namespace {

struct Eval {
  std::vector<int32_t> tokens;
  bool all_logits;
};

// The conversation above, with ids spread over the model's vocabulary.
std::vector<Eval> conversation(int64_t n_vocab) {
  const auto ids = [&](int n, int seed) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((seed + 37 * i) % n_vocab));
    return t;
  };
  std::vector<Eval> evals{{ids(11, 5), true}, {ids(2, 17), true}};
  for (int i = 0; i < 4; ++i) evals.push_back({ids(1, 11 + 53 * i), false});
  evals.push_back({ids(7, 29), true});
  return evals;
}

// Every eval's logits, in order, from a SequenceForward with these parameters.
std::vector<float> run(const ga::LoadedModel& model, ga::arch::SequenceParams p, const std::vector<Eval>& evals,
                       std::vector<int64_t>* rows_held = nullptr) {
  ga::arch::SequenceForward seq(model, p, nullptr);
  const int64_t V = seq.n_vocab();
  std::vector<float> all;
  int64_t pos = 0;
  for (const Eval& e : evals) {
    std::vector<float> out((e.all_logits ? e.tokens.size() : 1) * static_cast<size_t>(V));
    seq.eval(e.tokens, pos, e.all_logits, out.data());
    all.insert(all.end(), out.begin(), out.end());
    pos += static_cast<int64_t>(e.tokens.size());
  }
  if (rows_held != nullptr) {
    ga::arch::ContextParallelSequence cp(model, p, nullptr);
    int64_t at = 0;
    std::vector<float> out;
    for (const Eval& e : evals) {
      out.resize((e.all_logits ? e.tokens.size() : 1) * static_cast<size_t>(V));
      cp.eval(e.tokens, at, e.all_logits, out.data());
      at += static_cast<int64_t>(e.tokens.size());
    }
    *rows_held = cp.rows_held();
  }
  return all;
}

void expect_context_parallel_matches(const std::string& tag, const ga::LoadedModel& model, int64_t max_batch = 512) {
  const std::vector<Eval> evals = conversation(model.config.n_vocab);
  ga::arch::SequenceParams p;
  p.n_ctx = 64;
  p.max_batch = max_batch;
  const std::vector<float> want = run(model, p, evals);
  double scale = 0;
  for (const float x : want) scale = std::max(scale, static_cast<double>(std::abs(x)));
  int64_t positions = 0;
  for (const Eval& e : evals) positions += static_cast<int64_t>(e.tokens.size());
  for (const int world : {2, 3, 4}) {
    SCOPED_TRACE(tag + ", " + std::to_string(world) + " ranks, max_batch " + std::to_string(max_batch));
    ga::arch::SequenceParams cp = p;
    cp.context_parallel = world;
    std::vector<int64_t> rows;
    const std::vector<float> got = run(model, cp, evals, &rows);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double{got[i]} - want[i]));
    EXPECT_LE(worst, 1e-5 * scale);
    // the shards cover every position once and stay balanced
    ASSERT_EQ(rows.size(), static_cast<size_t>(world));
    EXPECT_EQ(std::accumulate(rows.begin(), rows.end(), int64_t{0}), positions);
    EXPECT_LE(*std::max_element(rows.begin(), rows.end()) - *std::min_element(rows.begin(), rows.end()), 2);
  }
}

ga::LoadedModel random_model(const char* preset, uint64_t seed) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ga-cp-" + std::string(preset) + "-" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  ga::tools::MakeModelOptions o;
  o.preset = preset;
  o.type = "F32";
  o.vocab_path = ga::test::shared_path("models/tinyllamas/stories260K.gguf");
  o.seed = seed;
  o.n_threads = 2;
  ga::tools::make_random_model(path, o);
  ga::LoadedModel m = ga::load_model(path);  // mapped: the file may go
  std::filesystem::remove(path);
  return m;
}

std::string arch_model(const std::string& name) { return ga::test::repo_path("tests/data/arch/" + name + "/model.gguf"); }

TEST(ContextParallel, Stories260KGivesTheOneRankLogits) {
  const ga::LoadedModel m = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  expect_context_parallel_matches("stories260K", m);
  // steps of 2 tokens per rank: the prompts go over the ring in several chunks
  expect_context_parallel_matches("stories260K", m, 2);
}

TEST(ContextParallel, TheFixtureModelGivesTheOneRankLogits) {
  expect_context_parallel_matches("fixture-f32", ga::load_model(ga::test::shared_path("fixtures/quant/fixture-f32.gguf")));
}

TEST(ContextParallel, SlidingWindowsSoftcapsAndGqaGiveTheOneRankLogits) {
  for (const char* name : {"gemma2", "gemma3", "qwen3"}) expect_context_parallel_matches(name, ga::load_model(arch_model(name)));
}

// The other families through the same seam: fused q|k|v (Phi-3), LongRoPE and YaRN tables, MoE feed-forwards.
TEST(ContextParallel, EveryAttentionFamilyGivesTheOneRankLogits) {
  for (const char* name : {"phi3", "phi3-longrope", "qwen3-yarn", "mixtral", "qwen2moe", "qwen3moe"}) {
    expect_context_parallel_matches(name, ga::load_model(arch_model(name)));
  }
}

TEST(ContextParallel, F16CacheGivesTheOneRankLogits) {
  const ga::LoadedModel m = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  const std::vector<Eval> evals = conversation(m.config.n_vocab);
  ga::arch::SequenceParams p;
  p.n_ctx = 64;
  p.kv_type = ga::DType::F16;
  const std::vector<float> want = run(m, p, evals);
  p.context_parallel = 3;
  const std::vector<float> got = run(m, p, evals);
  ASSERT_EQ(got.size(), want.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
  }
  EXPECT_LE(worst, 1e-5 * scale);  // both round the same K/V to F16
}

TEST(ContextParallel, PlansRingChunksZigzagAndShortOnesPassQ) {
  const std::vector<int64_t> empty(3, 0);
  const ga::arch::ChunkPlan ring = ga::arch::plan_chunk(11, empty);
  EXPECT_EQ(ring.attention, ga::cpu::ContextAttention::kRing);
  // zigzag shares of 6 chunks: {0, 9, 10}, {1, 2, 7, 8}, {3, 4, 5, 6}; the largest first, to the lowest ranks
  EXPECT_EQ(ring.tokens[0], (std::vector<int64_t>{1, 2, 7, 8}));
  EXPECT_EQ(ring.tokens[1], (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(ring.tokens[2], (std::vector<int64_t>{0, 9, 10}));
  for (int r = 0; r < 3; ++r) {
    for (const int64_t i : ring.tokens[r]) EXPECT_EQ(ring.keeper[i], r);
  }
  // the largest share goes to the least-filled rank: 3 tokens over 2 ranks are shares {2} and {0, 1}
  const std::vector<int64_t> uneven{5, 4};
  const ga::arch::ChunkPlan r2 = ga::arch::plan_chunk(3, uneven);
  EXPECT_EQ(r2.attention, ga::cpu::ContextAttention::kRing);
  EXPECT_EQ(r2.tokens[0], (std::vector<int64_t>{2}));
  EXPECT_EQ(r2.tokens[1], (std::vector<int64_t>{0, 1}));
    // too short to give every rank a token: every rank evaluates both, the least-filled shards keep them
  const std::vector<int64_t> held{4, 3, 3};
  const ga::arch::ChunkPlan q = ga::arch::plan_chunk(2, held);
  EXPECT_EQ(q.attention, ga::cpu::ContextAttention::kPassQ);
  EXPECT_EQ(q.keeper, (std::vector<int>{1, 2}));
  for (const auto& t : q.tokens) EXPECT_EQ(t, (std::vector<int64_t>{0, 1}));
}

TEST(ContextParallel, RefusesBadConfigurationsClearly) {
  const ga::LoadedModel m = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  ga::arch::SequenceParams p;
  p.n_ctx = 32;
  p.context_parallel = 0;
  EXPECT_THROW(ga::arch::SequenceForward(m, p, nullptr), ga::Error);
  p.context_parallel = 2;
  p.tensor_parallel = 2;
  try {
    ga::arch::SequenceForward seq(m, p, nullptr);
    ADD_FAILURE() << "context and tensor parallelism together were accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("tensor parallelism"), std::string::npos) << e.what();
  }
  // a recurrent state cannot be sharded by position
  const ga::LoadedModel rwkv = random_model("tiny-rwkv6", 7);
  p.tensor_parallel = 1;
  try {
    ga::arch::SequenceForward seq(rwkv, p, nullptr);
    ADD_FAILURE() << "a recurrent model was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("recurrent state"), std::string::npos) << e.what();
  }
  // a bad token, an overflow or a gap changes nothing: the next eval still gives the one-rank logits
  ga::arch::SequenceForward seq(m, p, nullptr);
  const int64_t V = seq.n_vocab();
  std::vector<float> out(static_cast<size_t>(V));
  const std::vector<int32_t> prompt{1, 403, 407, 261, 378};
  const int32_t bad = static_cast<int32_t>(V);
  EXPECT_THROW(seq.eval(std::span<const int32_t>(&bad, 1), 0, false, out.data()), ga::Error);
  EXPECT_THROW(seq.eval(prompt, 30, false, out.data()), ga::Error);  // 30 + 5 > n_ctx 32
  seq.eval(prompt, 0, false, out.data());
  EXPECT_THROW(seq.eval(prompt, 7, false, out.data()), ga::Error);   // positions 5 and 6 were never evaluated
  const int32_t next = 300;
  seq.eval(std::span<const int32_t>(&next, 1), 5, false, out.data());
  ga::arch::SequenceParams one = p;
  one.context_parallel = 1;
  ga::arch::SequenceForward ref(m, one, nullptr);
  std::vector<float> want(static_cast<size_t>(V));
  ref.eval(prompt, 0, false, want.data());
  ref.eval(std::span<const int32_t>(&next, 1), 5, false, want.data());
  for (int64_t i = 0; i < V; ++i) ASSERT_NEAR(out[i], want[i], 1e-4) << "logit " << i;
}

// Many short prompts (3 tokens over 2 ranks: shares of 1 and 2) stay balanced over the shards, and the logits
// of the last one equal the one-rank forward's.
TEST(ContextParallel, ManyShortPromptsStayBalanced) {
  const ga::LoadedModel m = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  ga::arch::SequenceParams p;
  p.n_ctx = 64;
  std::vector<Eval> evals;
  for (int i = 0; i < 21; ++i) evals.push_back({{static_cast<int32_t>(3 + i), static_cast<int32_t>(40 + 7 * i), 300}, false});
  const std::vector<float> want = run(m, p, evals);
  p.context_parallel = 2;
  std::vector<int64_t> rows;
  const std::vector<float> got = run(m, p, evals, &rows);
  EXPECT_LE(std::abs(rows[0] - rows[1]), 1) << rows[0] << " / " << rows[1];
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
  }
  EXPECT_LE(worst, 1e-5 * scale);
}

// An eval below the positions held replaces the later ones (every shard's tail), as the one-rank cache does.
TEST(ContextParallel, RewindingReplacesTheLaterPositions) {
  const ga::LoadedModel m = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  ga::arch::SequenceParams p;
  p.n_ctx = 32;
  p.context_parallel = 3;
  ga::arch::ContextParallelSequence cp(m, p, nullptr);
  const int64_t V = cp.n_vocab();
  std::vector<float> got(static_cast<size_t>(V)), want(static_cast<size_t>(V));
  const std::vector<int32_t> a{1, 403, 407, 261, 378, 429, 1, 300}, b{1, 403, 407, 261, 55, 66};
  cp.eval(a, 0, false, got.data());
  cp.eval(std::span<const int32_t>(b).subspan(4), 4, false, got.data());
  EXPECT_EQ(cp.rows_held()[0] + cp.rows_held()[1] + cp.rows_held()[2], 6);
  p.context_parallel = 1;
  ga::arch::SequenceForward ref(m, p, nullptr);
  ref.eval(b, 0, false, want.data());
  for (int64_t i = 0; i < V; ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << "logit " << i;
}

}  // namespace
