// Tensor parallelism on CPU ranks (the loopback transport): every rank of a 2- and 4-rank group evaluates the
// same tokens over its shard (tensor_parallel.h) and must give the unsplit model's logits, within 1e-5 of
// their scale: a prompt, then decode steps. Models: stories260K (F32; its FFN of 768 splits 2 and 4 ways),
// the F32 / F16 / Q8_0 fixture models (Q8_0: the down projection's columns split on block boundaries), and the
// tiny random Qwen3 (q/k norms), Gemma 2 (post norms, soft-caps), Phi-3 (fused q|k|v and gate|up) and
// Qwen3-MoE (experts' columns) models. Shards that cannot be made say why.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "dist/loopback.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"
#include "model/arch/tensor_parallel.h"
#include "model/tools/random_model.h"

namespace {

std::vector<float> run_sequence(const ga::LoadedModel& model, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& decode, ga::dist::Transport* transport) {
  ga::arch::SequenceParams p;
  p.n_ctx = 64;
  p.transport = transport;
  ga::arch::SequenceForward seq(model, p, nullptr);
  const int64_t V = model.config.n_vocab;
  std::vector<float> all(prompt.size() * static_cast<size_t>(V));
  seq.eval(prompt, 0, true, all.data());
  std::vector<float> row(static_cast<size_t>(V));
  for (size_t i = 0; i < decode.size(); ++i) {
    seq.eval(std::span<const int32_t>(&decode[i], 1), static_cast<int64_t>(prompt.size() + i), false, row.data());
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

void expect_shards_match(const std::string& tag, const ga::LoadedModel& model) {
  const int64_t V = model.config.n_vocab;
  std::vector<int32_t> prompt, decode;
  for (int i = 0; i < 9; ++i) prompt.push_back(static_cast<int32_t>((5 + 37 * i) % V));
  for (int i = 0; i < 4; ++i) decode.push_back(static_cast<int32_t>((11 + 53 * i) % V));
  const std::vector<float> want = run_sequence(model, prompt, decode, nullptr);
  double scale = 0;
  for (const float x : want) scale = std::max(scale, static_cast<double>(std::abs(x)));
  for (const int world : {2, 4}) {
    SCOPED_TRACE(tag + ", " + std::to_string(world) + " ranks");
    std::vector<ga::LoadedModel> shards;
    for (int r = 0; r < world; ++r) shards.push_back(ga::arch::shard_for_tensor_parallel(model, world, r));
    EXPECT_EQ(shards[0].config.n_head * world, model.config.n_head);
    // an untied classifier over a vocabulary the world divides is vocab-parallel: each rank holds V / W rows
    const ga::WeightView* output = model.find_weight("output.weight");
    const bool vocab_parallel = output != nullptr && !model.config.tied_embeddings && V % world == 0;
    EXPECT_EQ(shards[0].config.shard.vocab_parallel, vocab_parallel);
    if (vocab_parallel) {
      EXPECT_EQ(shards[0].weights.at("output.weight").rows() * world, output->rows());
    }
    std::vector<std::vector<float>> got(static_cast<size_t>(world));
    ga::dist::LoopbackGroup group(world);
    group.run([&](ga::dist::Transport& t) {
      got[static_cast<size_t>(t.rank())] = run_sequence(shards[static_cast<size_t>(t.rank())], prompt, decode, &t);
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(got[r].size(), want.size());
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double{got[r][i]} - want[i]));
      EXPECT_LE(worst, 1e-5 * scale) << "rank " << r;
    }
  }
}

TEST(TensorParallel, ShardsOfStories260KGiveTheUnsplitLogits) {
  expect_shards_match("stories260K", ga::load_model(ga::test::repo_path("models/stories260K.gguf")));
}

TEST(TensorParallel, ShardsOfTheFixtureModelsGiveTheUnsplitLogits) {
  for (const char* type : {"f32", "F16", "Q8_0"}) {
    expect_shards_match(type, ga::load_model(ga::test::shared_path(std::string("fixtures/quant/fixture-") + type + ".gguf")));
  }
}

TEST(TensorParallel, ShardsOfEveryFamilyGiveTheUnsplitLogits) {
  uint64_t seed = 3;
  for (const char* preset : {"tiny-qwen3", "tiny-gemma2", "tiny-phi3", "tiny-qwen3moe", "tiny-qwen2moe"}) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("ga-tp-" + std::string(preset) + "-" + std::to_string(::getpid()) +
                                                   ".gguf")).string();
    ga::tools::MakeModelOptions o;
    o.preset = preset;
    o.type = "F32";
    o.vocab_path = ga::test::shared_path("models/tinyllamas/stories260K.gguf");
    o.seed = seed++;
    o.n_threads = 2;
    ga::tools::make_random_model(path, o);
    const ga::LoadedModel m = ga::load_model(path);  // mapped: the file may go
    std::filesystem::remove(path);
    expect_shards_match(preset, m);
  }
}

TEST(TensorParallel, RefusesWhatDoesNotSplit) {
  const ga::LoadedModel m = ga::load_model(ga::test::repo_path("models/stories260K.gguf"));
  // 8 heads and 4 KV heads: 3 ranks divide neither
  EXPECT_THROW(ga::arch::shard_for_tensor_parallel(m, 3, 0), ga::Error);
  EXPECT_THROW(ga::arch::shard_for_tensor_parallel(m, 2, 2), ga::Error);
  const ga::LoadedModel half = ga::arch::shard_for_tensor_parallel(m, 2, 1);
  EXPECT_THROW(ga::arch::shard_for_tensor_parallel(half, 2, 0), ga::Error);  // a shard is not split again
  // a shard without its group
  ga::arch::SequenceParams p;
  p.n_ctx = 16;
  EXPECT_THROW(ga::arch::SequenceForward(half, p, nullptr), ga::Error);
}

}  // namespace

namespace {

// The same through SequenceParams::tensor_parallel (what Session and `--tensor-parallel` use): the ranks live
// inside one SequenceForward, and a bad token is refused on every rank without breaking the next eval.
TEST(TensorParallel, OneSequenceForwardOverRanks) {
  const ga::LoadedModel m = ga::load_model(ga::test::repo_path("models/stories260K.gguf"));
  const std::vector<int32_t> prompt{1, 403, 407, 261, 378, 429, 1}, next{300};
  const std::vector<float> want = run_sequence(m, prompt, next, nullptr);
  for (const int world : {2, 4}) {
    ga::arch::SequenceParams p;
    p.n_ctx = 64;
    p.tensor_parallel = world;
    ga::arch::SequenceForward seq(m, p, nullptr);
    const int64_t V = seq.n_vocab();
    std::vector<float> got(prompt.size() * static_cast<size_t>(V) + static_cast<size_t>(V));
    seq.eval(prompt, 0, true, got.data());
    const int32_t bad = static_cast<int32_t>(V);
    EXPECT_THROW(seq.eval(std::span<const int32_t>(&bad, 1), 7, false, got.data() + prompt.size() * V), ga::Error);
    seq.eval(next, 7, false, got.data() + prompt.size() * V);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(want[i])));
      worst = std::max(worst, std::abs(double{got[i]} - want[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << world << " ranks";
  }
}

}  // namespace
