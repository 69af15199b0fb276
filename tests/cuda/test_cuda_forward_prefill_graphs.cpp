// The prefill graphs of the CUDA forward (cuda_llama_prefill_graph.cpp): a prompt step replayed from the graph of
// its length bucket, with the rows past the prompt padded, against the same forward with the graphs off (the
// eager path, kernel by kernel) and against the CPU reference (f16 KV), for several prompt lengths per bucket.
//
// What must hold:
//   * the replayed prefill's logits and the decode steps after it (which read the K/V the graph stored) match
//     the CPU reference within the whole-model tolerance (rel L2 1e-2) and the eager GPU path within 1e-4 (same
//     kernels and algorithms, only more rows), with the same greedy token;
//   * the pad rows store no K/V: in the paged test the padded prompt's stale block-table entries name another
//     sequence's blocks, whose next decode step would read whatever a pad row wrote there;
//   * the graph served every step it should (PrefillGraphStats::replays and padded_rows count them), and a
//     prompt whose padded rows would pass the cache's end ran enqueued.
// Models: a random tiny-hd64 (head_dim 64, GQA: the tuned attention, the Hopper flash prefill on sm_90) and
// stories260K (head_dim 8: the simple attention).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "backends/cuda/gemm.h"
#include "common/test_data.h"
#include "core/thread_pool.h"
#include "cuda/cuda_harness.h"
#include "cuda/logits_check.h"
#include "cuda/random_test_model.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "model/arch/architecture.h"
#include "model/arch/forward.h"
#include "model/tools/random_model.h"

namespace {

using ga::test::cuda::expect_logit_rows_close;

constexpr double kCpuRelL2 = 1e-2;    // the CUDA forward's whole-model tolerance (test_cuda_forward.cpp)
constexpr double kEagerRelL2 = 1e-4;  // graph vs eager: the same kernels on more rows
constexpr int64_t kGraphMax = 64;     // the forwards' max_batch too: buckets 16, 20, 24, 28, 32, 40, 48, 56, 64

const ga::LoadedModel& tiny_hd64() {
  static const ga::LoadedModel model = ga::test::cuda::load_random_test_model("ga-pgraph-", "tiny-hd64", "F16", 7);
  return model;
}

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Expects gpu's row close to the CPU's and to the eager GPU's, with the same greedy token.
void expect_rows(const std::string& what, std::span<const float> graph, std::span<const float> eager,
                 std::span<const float> cpu, int64_t n_vocab, double& worst_cpu, double& worst_eager) {
  expect_logit_rows_close(what + " (graph vs CPU)", graph, cpu, n_vocab, kCpuRelL2, worst_cpu);
  expect_logit_rows_close(what + " (eager vs CPU)", eager, cpu, n_vocab, kCpuRelL2, worst_cpu);
  expect_logit_rows_close(what + " (graph vs eager)", graph, eager, n_vocab, kEagerRelL2, worst_eager);
  for (size_t r = 0; r + static_cast<size_t>(n_vocab) <= graph.size() && r < eager.size(); r += n_vocab) {
    EXPECT_EQ(argmax(graph.subspan(r, n_vocab)), argmax(eager.subspan(r, n_vocab))) << what << ": greedy token";
  }
}

// One sequence (CudaForward, Session's engine): prompts of several lengths per bucket from position 0, each
// followed by two decode steps and a second prompt chunk at a later position; last, a prompt that ends too close
// to the context's end for its bucket's padding (enqueued).
void check_contiguous(const std::string& tag, const ga::LoadedModel& model) {
  const int64_t n_ctx = 128, n_vocab = model.config.n_vocab;
  ga::cuda::CudaForwardParams p;
  p.n_ctx = n_ctx;
  p.max_batch = kGraphMax;
  p.prefill_graph_max_tokens = kGraphMax;
  auto graph = ga::cuda::make_cuda_forward(model, *ga::arch::make_program_factory(model), p);
  p.prefill_graph_max_tokens = 0;
  auto eager = ga::cuda::make_cuda_forward(model, *ga::arch::make_program_factory(model), p);
  graph->warm_up_matmuls();  // captures every bucket's graph
  eager->warm_up_matmuls();
  const ga::cuda::PrefillGraphStats warm = graph->prefill_graph_stats();
  EXPECT_EQ(warm.max_tokens, kGraphMax);
  EXPECT_EQ(warm.captured, 9) << "buckets 16 .. 64";
  EXPECT_EQ(eager->prefill_graph_stats().captured, 0);
  std::printf("%s: %lld prefill graphs captured in %.1f ms, %.2f MiB\n", tag.c_str(),
              static_cast<long long>(warm.captured), warm.capture_seconds * 1e3,
              static_cast<double>(warm.device_bytes) / (1 << 20));

  ga::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 2;
  so.kv_type = ga::KvType::F16;
  so.device = "cpu";
  ga::Session cpu(model, so);

  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(n_vocab - 1));
  const auto tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = token(rng);
    return t;
  };
  std::vector<float> g(static_cast<size_t>(n_vocab)), e(g.size());
  double worst_cpu = 0, worst_eager = 0;
  int64_t replays = 0, padded = 0;
  // expect: the graph replays the step should make (one per internal step of a graph's bucket) and their pad rows
  const auto step = [&](const std::string& what, const std::vector<int32_t>& t, int64_t pos0, int64_t expect_replays,
                        int64_t expect_padded) {
    const ga::cuda::PrefillGraphStats before = graph->prefill_graph_stats();
    std::fill(g.begin(), g.end(), std::nanf(""));
    std::fill(e.begin(), e.end(), std::nanf(""));
    graph->eval(t, pos0, false, g.data());
    eager->eval(t, pos0, false, e.data());
    const std::vector<float> c = cpu.eval(t);
    expect_rows(tag + " " + what, g, e, c, n_vocab, worst_cpu, worst_eager);
    const ga::cuda::PrefillGraphStats now = graph->prefill_graph_stats();
    EXPECT_EQ(now.replays - before.replays, expect_replays) << tag << " " << what;
    EXPECT_EQ(now.padded_rows - before.padded_rows, expect_padded) << tag << " " << what;
    replays += expect_replays;
    padded += expect_padded;
  };
  for (const int64_t n : {9, 13, 16, 17, 19, 20, 23, 33, 40, 41, 57, 64}) {
    cpu.reset();
    const std::string len = std::to_string(n);
    step("prompt of " + len, tokens(n), 0, 1, ga::cuda::gemm_bucket(n) - n);
    step("decode 1 after " + len, tokens(1), n, 0, 0);
    step("decode 2 after " + len, tokens(1), n + 1, 0, 0);
    step("chunk of 21 after " + len, tokens(21), n + 2, 1, 3);  // pos0 > 0, bucket 24
    step("decode after the chunk", tokens(1), n + 23, 0, 0);
  }
  cpu.reset();
  step("prompt of 100", tokens(100), 0, 2, 4);            // two steps (max_batch 64): buckets 64 and 40
  step("chunk of 15 at 100", tokens(15), 100, 1, 1);      // 100 + bucket 16 <= n_ctx 128
  step("chunk of 13 at 115", tokens(13), 115, 0, 0);      // 115 + bucket 16 > 128: enqueued
  const ga::cuda::PrefillGraphStats after = graph->prefill_graph_stats();
  EXPECT_EQ(after.replays, replays);
  EXPECT_EQ(after.padded_rows, padded);
  EXPECT_EQ(after.captured, warm.captured) << "no capture after the warm-up";
  std::printf("%-16s contiguous: %lld replays (%lld pad rows), worst rel L2 vs CPU %.2e, graph vs eager %.2e\n",
              tag.c_str(), static_cast<long long>(after.replays), static_cast<long long>(after.padded_rows), worst_cpu,
              worst_eager);
}

TEST(CudaForwardPrefillGraphs, ContiguousMatchesEagerAndCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  ::unsetenv("GA_PREFILL_GRAPHS");  // the diagnostic switch would override the parameters
  check_contiguous("tiny-hd64", tiny_hd64());
  check_contiguous("stories260K", ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf")));
}

// Many sequences over a paged pool (CudaBatchForward, the Scheduler's engine), block size 4: a lone prompt of A
// (graph), a lone prompt of B whose block table is shorter than A's (the metadata's entries past it still name
// A's blocks, where pad rows at B's positions 12..15 would land), decode steps of both, A's next chunk alone
// (graph, pos0 > 0), two prompts in one step (enqueued: several sequences), decode again. A's steps after B's
// padded prefill read A's K/V.
TEST(CudaForwardPrefillGraphs, PagedMatchesEagerAndCpuAndLeavesOtherSequencesAlone) {
  GA_REQUIRE_CUDA_DEVICE();
  ::unsetenv("GA_PREFILL_GRAPHS");
  const ga::LoadedModel& model = tiny_hd64();
  const int64_t bs = 4, n_blocks = 48, n_vocab = model.config.n_vocab;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(5);
  std::shuffle(ids.begin(), ids.end(), rng);
  const std::vector<int32_t> table_a(ids.begin(), ids.begin() + 16);       // 64 positions
  const std::vector<int32_t> table_b(ids.begin() + 16, ids.begin() + 19);  // 12 positions
  const std::vector<int32_t> table_c(ids.begin() + 19, ids.begin() + 27);  // 32 positions

  ga::cuda::CudaBatchForwardParams p;
  p.block_size = bs;
  p.n_blocks = n_blocks;
  p.max_batch_tokens = kGraphMax;
  p.max_seqs = 4;
  p.max_seq_positions = 64;
  p.prefill_graph_max_tokens = kGraphMax;
  auto graph = ga::cuda::make_cuda_batch_forward(model, *ga::arch::make_program_factory(model), p);
  p.prefill_graph_max_tokens = 0;
  auto eager = ga::cuda::make_cuda_batch_forward(model, *ga::arch::make_program_factory(model), p);
  graph->warm_up_matmuls();
  EXPECT_EQ(graph->prefill_graph_stats().captured, 9);
  ga::ThreadPool pool(2);
  ga::arch::BatchForward cpu(model, &pool);
  ga::cpu::KvPool cpu_kv(cpu.state(), ga::cpu::KvPoolParams{n_blocks, bs, ga::DType::F16});

  struct Run {
    const std::vector<int32_t>* table;
    int64_t pos0, n;
  };
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(n_vocab - 1));
  double worst_cpu = 0, worst_eager = 0;
  const auto step = [&](const std::string& what, const std::vector<Run>& runs, int64_t expect_replays) {
    std::vector<std::span<const int32_t>> tables;
    std::vector<ga::arch::BatchToken> batch;
    std::vector<ga::cuda::BatchEntry> entries;
    for (size_t r = 0; r < runs.size(); ++r) {
      tables.emplace_back(*runs[r].table);
      for (int64_t i = 0; i < runs[r].n; ++i) {
        ga::arch::BatchToken t{token(rng), runs[r].pos0 + i, static_cast<int32_t>(r), i == runs[r].n - 1};
        batch.push_back(t);
        entries.push_back({t.token, t.pos, t.seq, t.logits});
      }
    }
    std::vector<float> want(runs.size() * static_cast<size_t>(n_vocab));
    cpu.forward(batch, tables, cpu_kv, want.data());
    const int64_t before = graph->prefill_graph_stats().replays;
    const std::span<const float> g0 = graph->forward(entries, tables);
    const std::vector<float> g(g0.begin(), g0.end());
    const std::span<const float> e = eager->forward(entries, tables);
    expect_rows("paged " + what, g, e, want, n_vocab, worst_cpu, worst_eager);
    EXPECT_EQ(graph->prefill_graph_stats().replays - before, expect_replays) << what;
  };
  step("A's prompt of 37 (bucket 40)", {{&table_a, 0, 37}}, 1);
  step("B's prompt of 9 (bucket 16, pads over A's blocks)", {{&table_b, 0, 9}}, 1);
  step("decode A, B", {{&table_a, 37, 1}, {&table_b, 9, 1}}, 0);
  step("A's chunk of 11 at 38 (bucket 16)", {{&table_a, 38, 11}}, 1);
  step("decode B, A", {{&table_b, 10, 1}, {&table_a, 49, 1}}, 0);
  step("C's prompt of 20 and B's decode (two runs: enqueued)", {{&table_c, 0, 20}, {&table_b, 11, 1}}, 0);
  step("A's chunk of 13 at 50 (50 + 16 > 64: enqueued)", {{&table_a, 50, 13}}, 0);
  step("decode A, C", {{&table_a, 63, 1}, {&table_c, 20, 1}}, 0);
  const ga::cuda::PrefillGraphStats s = graph->prefill_graph_stats();
  EXPECT_EQ(s.replays, 3);
  EXPECT_EQ(s.padded_rows, 3 + 7 + 5);
  std::printf("paged: %lld replays, worst rel L2 vs CPU %.2e, graph vs eager %.2e\n", static_cast<long long>(s.replays),
              worst_cpu, worst_eager);
}

// Without warm_up_matmuls() a step captures its bucket's graph on first use; with the graphs off nothing is
// captured; the parameters' bound is honoured.
TEST(CudaForwardPrefillGraphs, CapturesOnFirstUseAndHonoursTheBound) {
  GA_REQUIRE_CUDA_DEVICE();
  ::unsetenv("GA_PREFILL_GRAPHS");
  const ga::LoadedModel& model = tiny_hd64();
  ga::cuda::CudaForwardParams p;
  p.n_ctx = 128;
  p.max_batch = kGraphMax;
  p.prefill_graph_max_tokens = 24;
  auto fwd = ga::cuda::make_cuda_forward(model, *ga::arch::make_program_factory(model), p);
  std::vector<float> logits(static_cast<size_t>(model.config.n_vocab));
  const std::vector<int32_t> t21(21, 3), t30(30, 3);
  fwd->eval(t21, 0, false, logits.data());  // bucket 24: captured now
  fwd->eval(t30, 0, false, logits.data());  // bucket 32 > 24: enqueued
  fwd->eval(t21, 0, false, logits.data());  // replayed
  const ga::cuda::PrefillGraphStats s = fwd->prefill_graph_stats();
  EXPECT_EQ(s.captured, 1);
  EXPECT_EQ(s.replays, 2);
  EXPECT_EQ(s.padded_rows, 6);
  for (const float v : logits) ASSERT_TRUE(std::isfinite(v));
  p.use_cuda_graph = false;  // no graphs at all
  auto off = ga::cuda::make_cuda_forward(model, *ga::arch::make_program_factory(model), p);
  off->warm_up_matmuls();
  off->eval(t21, 0, false, logits.data());
  EXPECT_EQ(off->prefill_graph_stats().max_tokens, 0);
  EXPECT_EQ(off->prefill_graph_stats().captured + off->prefill_graph_stats().replays, 0);
}

}  // namespace
