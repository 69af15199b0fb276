// The batched CUDA forward over a paged KV pool (cuda::CudaBatchForward) against the CPU reference
// arch::BatchForward + cpu::KvPool (f16 KV, the same block tables) on the same batches.
//
// A script of steps drives both with what a scheduler produces: prompt chunks of awkward lengths,
// decode tokens of sequences that started in earlier steps, chunks that continue a prompt, a new
// sequence joining mid-way, logits wanted on scattered rows (so the GPU's gather of sampled rows is
// exercised) and on whole chunks. Block tables are shuffled block ids (a sequence's blocks are never
// adjacent in the pool), with block sizes 16 and 7. Every logits row of every step is compared by
// relative L2 (the CUDA forward's whole-model tolerance, test_cuda_forward.cpp). Models: stories260K
// (head_dim 8) and the F16 fixture (head_dim 32), which take the simple paged attention, and a
// random tiny-hd64 model (head_dim 64, GQA), which takes the tuned paged attention kernel.
// Decode-only steps run once as captured graphs and once enqueued. Also: bad batches are refused
// before any work, and a pool that cannot fit is an OutOfMemory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "common/test_data.h"
#include "core/thread_pool.h"
#include "cuda/cuda_harness.h"
#include "cuda/family_models.h"
#include "cuda/logits_check.h"
#include "cuda/random_test_model.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/architecture.h"
#include "model/arch/forward.h"
#include "model/tools/random_model.h"

namespace {

constexpr double kMaxRelL2 = 1e-2;

struct Run {
  int seq;
  int64_t n;            // tokens in this step
  bool logits_last;     // the run's last token samples
  bool logits_all = false;
};

struct Script {
  int n_seqs;
  std::vector<std::vector<Run>> steps;
};

// Prompts of 37, 5, 19 and 1 tokens, then decodes; sequence 4 joins at step 2 with a 40-token prompt
// split 23 + 17; step 3 has a run whose every token wants logits.
Script mixed_script() {
  Script s;
  s.n_seqs = 5;
  s.steps = {
      {{0, 37, true}, {1, 5, true}, {2, 11, false}, {3, 1, true}},
      {{0, 1, true}, {1, 1, true}, {3, 1, true}, {2, 8, true}},
      {{1, 1, true}, {0, 1, true}, {4, 23, false}, {2, 1, true}, {3, 1, true}},
      {{4, 17, true, true}, {0, 1, true}, {1, 1, true}, {2, 1, true}, {3, 1, true}},
      {{0, 1, true}, {1, 1, true}, {2, 1, true}, {3, 1, true}, {4, 1, true}},
      {{3, 1, true}, {4, 1, true}, {0, 1, true}},
  };
  return s;
}

size_t check_model(const std::string& tag, const ga::LoadedModel& model, int64_t block_size, bool graphs) {
  const Script script = mixed_script();
  const int64_t max_positions = 64;
  const int64_t blocks_per_seq = (max_positions + block_size - 1) / block_size;
  const int64_t n_blocks = blocks_per_seq * script.n_seqs + 3;  // a few never used

  // Shuffled block ids, one table per sequence covering max_positions.
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(static_cast<unsigned>(block_size) * 977u);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(script.n_seqs));
  for (int s = 0; s < script.n_seqs; ++s) {
    tables[static_cast<size_t>(s)].assign(ids.begin() + s * blocks_per_seq, ids.begin() + (s + 1) * blocks_per_seq);
  }

  ga::ThreadPool pool(2);
  ga::arch::BatchForward cpu(model, &pool, max_positions);  // the GPU's context (LongRoPE picks its factors by it)
  ga::cpu::KvPool cpu_kv(cpu.state(), ga::cpu::KvPoolParams{n_blocks, block_size, ga::DType::F16});
  ga::cuda::CudaBatchForwardParams p;
  p.block_size = block_size;
  p.n_blocks = n_blocks;
  p.max_batch_tokens = 64;
  p.max_seqs = 24;  // bounds the logits rows too (step 3 wants 21)
  p.max_seq_positions = max_positions;
  p.use_cuda_graph = graphs;  // steps 4 and 5 are decode-only: replayed graphs when on
  auto gpu = ga::cuda::make_cuda_batch_forward(model, *ga::arch::make_program_factory(model), p);
  EXPECT_EQ(gpu->n_blocks(), n_blocks);
  EXPECT_EQ(gpu->block_size(), block_size);

  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config.n_vocab - 1));
  std::vector<int64_t> filled(static_cast<size_t>(script.n_seqs), 0);
  const int64_t n_vocab = model.config.n_vocab;
  size_t rows = 0;
  double worst = 0;
  for (size_t step = 0; step < script.steps.size(); ++step) {
    // Sequence indices of the batch are positions in `step_tables` (a per-step list, as a scheduler
    // passes only the sequences it runs), in an order different from the runs'.
    std::vector<int> order;
    for (const Run& r : script.steps[step]) order.push_back(r.seq);
    std::vector<int> table_order = order;
    std::reverse(table_order.begin(), table_order.end());
    std::vector<std::span<const int32_t>> step_tables;
    for (int s : table_order) step_tables.emplace_back(tables[static_cast<size_t>(s)]);
    std::vector<ga::arch::BatchToken> batch;
    std::vector<ga::cuda::BatchEntry> entries;
    for (const Run& r : script.steps[step]) {
      const int32_t index = static_cast<int32_t>(std::find(table_order.begin(), table_order.end(), r.seq) -
                                                 table_order.begin());
      for (int64_t i = 0; i < r.n; ++i) {
        ga::arch::BatchToken e;
        e.token = token(rng);
        e.pos = filled[static_cast<size_t>(r.seq)] + i;
        e.seq = index;
        e.logits = r.logits_all || (r.logits_last && i == r.n - 1);
        batch.push_back(e);
        entries.push_back({e.token, e.pos, e.seq, e.logits});
      }
      filled[static_cast<size_t>(r.seq)] += r.n;
    }
    size_t n_out = 0;
    for (const auto& e : batch) n_out += e.logits ? 1 : 0;
    std::vector<float> want(n_out * static_cast<size_t>(n_vocab));
    cpu.forward(batch, step_tables, cpu_kv, want.data());
    const std::span<const float> got = gpu->forward(entries, step_tables);
    rows += ga::test::cuda::expect_logit_rows_close(tag + " step " + std::to_string(step) + " logits", got, want, n_vocab,
                                                    kMaxRelL2, worst);
  }
  std::printf("%-20s block_size %2lld, graphs %-3s: worst rel L2 %.2e over %zu logits rows\n", tag.c_str(),
              static_cast<long long>(block_size), graphs ? "on" : "off", worst, rows);
  return rows;
}

const ga::LoadedModel& tiny_hd64() {
  static const ga::LoadedModel model = ga::test::cuda::load_random_test_model("ga-tiny-hd64-", "tiny-hd64", "F16", 3);
  return model;
}

// A Q4_K_M mix (quant_mix.h): 4 layers, attn_v and ffn_down in Q6_K in layers 2 and 3 (use_more_bits), so
// those layers run q+k as one fused Q4_K GEMV and v apart (the CUDA engine's linear_concat), the others q+k+v fused;
// the Q4_K ffn_down / attn_o GEMVs read x rounded once by SwiGLU / the pre-pass, the others round it themselves
// and the Q6_K ones read x in float.
const ga::LoadedModel& tiny_q4_k_m() {
  static const ga::LoadedModel model = ga::test::cuda::load_random_test_model("ga-tiny-q4km-", "tiny", "Q4_K_M", 5);
  return model;
}

TEST(CudaBatchForward, MatchesTheCpuBatchForwardOnAMixedQ4_K_MModel) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel& model = tiny_q4_k_m();
  int mixed_layers = 0;
  for (int il = 0; il < 4; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    mixed_layers += model.weights.at(p + "attn_v.weight").type != model.weights.at(p + "attn_q.weight").type ? 1 : 0;
  }
  EXPECT_GT(mixed_layers, 0) << "the mix no longer has layers with attn_v of another type: the q+k fusion is untested";
  EXPECT_GT(check_model("random tiny Q4_K_M", model, 16, true), 0u);
  EXPECT_GT(check_model("random tiny Q4_K_M", model, 7, false), 0u);
}

TEST(CudaBatchForward, MatchesTheCpuBatchForwardOnStories260K) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  EXPECT_GT(check_model("stories260K", model, 16, true), 0u);
  EXPECT_GT(check_model("stories260K", model, 7, false), 0u);
}

TEST(CudaBatchForward, MatchesTheCpuBatchForwardOnTheF16Fixture) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::load_model(ga::test::shared_path("fixtures/quant/fixture-F16.gguf"));
  EXPECT_GT(check_model("fixture-F16", model, 16, true), 0u);
}

TEST(CudaBatchForward, MatchesTheCpuBatchForwardWithTheTunedPagedAttention) {
  GA_REQUIRE_CUDA_DEVICE();
  EXPECT_GT(check_model("random tiny-hd64", tiny_hd64(), 16, true), 0u);
  EXPECT_GT(check_model("random tiny-hd64", tiny_hd64(), 7, false), 0u);
}

// Every architecture family (family_models.h): the script reaches 61 positions, past every model's window, so
// the windowed layers' paged decode and prefill skip and mask keys; block size 7 cuts windows mid-block.
TEST(CudaBatchForward, MatchesTheCpuBatchForwardForEveryFamily) {
  GA_REQUIRE_CUDA_DEVICE();
  for (const ga::test::cuda::FamilyModel& m : ga::test::cuda::family_models()) {
    SCOPED_TRACE(m.tag);
    EXPECT_GT(check_model(m.tag, m.model, 16, true), 0u);
    EXPECT_GT(check_model(m.tag, m.model, 7, false), 0u);
  }
}

// The recurrent models (RWKV v4-v7 tiny files): the same script, so each run's state slot is read at its first
// row, walked through its rows and written back with the other runs of the step around it.
TEST(CudaBatchForward, MatchesTheCpuBatchForwardOnRwkvModels) {
  GA_REQUIRE_CUDA_DEVICE();
  for (const char* file : {"4v0-660K-FP16", "5v1-730K-FP16", "5v2-730K-FP16", "6v0-3m-Q5_1", "7v0-834K-FP16"}) {
    SCOPED_TRACE(file);
    const ga::LoadedModel model =
        ga::load_model(ga::test::shared_path(std::string("models/rwkv-tiny/tiny-rwkv-") + file + ".bin"));
    EXPECT_GT(check_model(std::string("rwkv ") + file, model, 16, true), 0u);
    EXPECT_GT(check_model(std::string("rwkv ") + file, model, 7, false), 0u);
  }
}

TEST(CudaBatchForward, RefusesBadBatchesAndPoolsThatDoNotFit) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  ga::cuda::CudaBatchForwardParams p;
  p.n_blocks = 8;
  p.block_size = 16;
  p.max_batch_tokens = 32;
  p.max_seqs = 4;
  p.max_seq_positions = 64;
  auto gpu = ga::cuda::make_cuda_batch_forward(model, *ga::arch::make_program_factory(model), p);
  const std::vector<int32_t> table = {3, 1}, table_b = {5};
  const std::vector<std::span<const int32_t>> tables = {table, table_b};
  const auto refused = [&](std::vector<ga::cuda::BatchEntry> batch) {
    EXPECT_THROW(gpu->forward(batch, tables), ga::Error);
  };
  refused({{static_cast<int32_t>(model.config.n_vocab), 0, 0, true}});  // token outside the vocabulary
  refused({{1, 0, 2, true}});                                            // no such sequence
  refused({{1, 32, 0, true}});                                           // beyond the table's 32 positions
  refused({{1, 0, 0, false}, {1, 2, 0, true}});                          // a gap inside a run
  refused({{1, 0, 0, false}, {1, 1, 1, false}, {1, 1, 0, true}});        // two runs of one sequence
  const std::vector<int32_t> bad_table = {8};
  const std::vector<std::span<const int32_t>> bad = {bad_table};
  EXPECT_THROW(gpu->forward(std::vector<ga::cuda::BatchEntry>{{1, 0, 0, true}}, bad), ga::Error);  // block 8 of 8
  // After the refusals, a good batch still works and gives finite logits.
  const std::span<const float> out = gpu->forward(std::vector<ga::cuda::BatchEntry>{{1, 0, 0, true}}, tables);
  ASSERT_EQ(out.size(), static_cast<size_t>(model.config.n_vocab));
  for (const float v : out) ASSERT_TRUE(std::isfinite(v));

  p.n_blocks = int64_t{1} << 26;  // 2^30 positions x 640 bytes: far beyond any GPU
  p.block_size = 16;
  try {
    ga::cuda::make_cuda_batch_forward(model, *ga::arch::make_program_factory(model), p);
    ADD_FAILURE() << "a pool larger than the device was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::OutOfMemory) << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB"), std::string::npos) << e.what();
  }
}

}  // namespace
