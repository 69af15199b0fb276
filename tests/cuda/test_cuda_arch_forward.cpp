// Every architecture family's forward on the GPU (Session device "cuda") against the CPU reference Session
// with an F16 KV cache, on the models of family_models.h, and their greedy tokens.
//
// Three feeding patterns cover the three code paths of the CUDA engine, as test_cuda_forward.cpp does for the
// Llama fixtures: a 5-token prompt (the small-batch GEMV), one-token steps after it (the decode graph), and the
// whole 40-token sequence as one prefill after a reset (the cuBLAS GEMM, quantized matrices dequantized to
// f16; past every model's window). Every row of logits: rel L2 <= 1e-2 (the engine's bar). Greedy: 24 tokens
// chosen by each device alone from the same prompt must be the same, except after a step where the CPU's two
// best logits are within 1e-3 of each other (a near-tie that f16 rounding may break either way; such a step
// ends the comparison and is printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "cuda/cuda_harness.h"
#include "cuda/family_models.h"
#include "cuda/greedy_check.h"
#include "cuda/logits_check.h"
#include "gpu_accel/session.h"

namespace {

using ga::test::cuda::expect_logit_rows_close;

constexpr double kMaxRelL2 = 1e-2;
constexpr double kNearTie = 1e-3;

TEST(CudaArchForward, EveryFamilyMatchesTheCpuSession) {
  GA_REQUIRE_CUDA_DEVICE();
  size_t rows = 0;
  for (const ga::test::cuda::FamilyModel& m : ga::test::cuda::family_models()) {
    SCOPED_TRACE(m.tag);
    ga::Session cpu(m.model, ga::test::cuda::family_session_options("cpu", 96));
    ga::Session gpu(m.model, ga::test::cuda::family_session_options("cuda", 96));
    ASSERT_EQ(gpu.device(), "cuda:0");
    const int64_t n_vocab = m.model.config.n_vocab;
    const std::vector<int32_t> seq = ga::test::cuda::random_token_ids(n_vocab, 40, 5);
    double worst = 0;
    const std::span<const int32_t> prompt(seq.data(), 5);
    rows += expect_logit_rows_close(m.tag + " prompt", gpu.eval(prompt, true), cpu.eval(prompt, true), n_vocab,
                                    kMaxRelL2, worst);
    for (size_t i = 5; i < seq.size(); ++i) {
      const std::span<const int32_t> one(&seq[i], 1);
      rows += expect_logit_rows_close(m.tag + " decode " + std::to_string(i), gpu.eval(one), cpu.eval(one), n_vocab,
                                      kMaxRelL2, worst);
    }
    cpu.reset();
    gpu.reset();
    rows += expect_logit_rows_close(m.tag + " prefill", gpu.eval(seq, true), cpu.eval(seq, true), n_vocab, kMaxRelL2,
                                    worst);
    std::printf("%-24s worst rel L2 %.2e\n", m.tag.c_str(), worst);
  }
  EXPECT_GT(rows, 0u);
}

TEST(CudaArchForward, EveryFamilyGreedyTokensMatchTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  for (const ga::test::cuda::FamilyModel& m : ga::test::cuda::family_models()) {
    SCOPED_TRACE(m.tag);
    ga::Session cpu(m.model, ga::test::cuda::family_session_options("cpu", 96));
    ga::Session gpu(m.model, ga::test::cuda::family_session_options("cuda", 96));
    const std::vector<int32_t> prompt = ga::test::cuda::random_token_ids(m.model.config.n_vocab, 8, 9);
    const int compared = ga::test::cuda::expect_same_greedy_tokens(m.tag, cpu, gpu, prompt, 24, kNearTie);
    EXPECT_GT(compared, 0);
  }
}

// A MoE layer's prefill (steps of more than 64 tokens) has two CUDA paths, chosen by the experts' shape
// (cuda_engine.cpp): the grouped GEMM, captured in the prefill graphs, and cuBLAS per routed expert. Both,
// forced through GA_MOE_PREFILL, on every MoE family: an 80-token prefill, then decode steps after it.
TEST(CudaArchForward, MoePrefillPathsMatchTheCpuSession) {
  GA_REQUIRE_CUDA_DEVICE();
  size_t rows = 0;
  for (const ga::test::cuda::FamilyModel& m : ga::test::cuda::family_models()) {
    if (m.model.config.transformer.n_expert == 0) continue;
    const int64_t n_vocab = m.model.config.n_vocab;
    const std::vector<int32_t> seq = ga::test::cuda::random_token_ids(n_vocab, 84, 7);
    const std::span<const int32_t> prompt(seq.data(), 80);
    ga::Session cpu(m.model, ga::test::cuda::family_session_options("cpu", 96));
    const std::vector<float> want = cpu.eval(prompt, true);
    std::vector<std::vector<float>> want_decode;
    for (size_t i = 80; i < seq.size(); ++i) want_decode.push_back(cpu.eval(std::span<const int32_t>(&seq[i], 1)));
    const auto& t = m.model.config;
    const bool grouped_fits = t.n_embd % 64 == 0 && t.transformer.n_ff_exp % 64 == 0;  // the grouped GEMM's tiles
    for (const char* path : {"grouped", "per-expert"}) {
      if (!grouped_fits && std::string(path) == "grouped") continue;
      SCOPED_TRACE(m.tag + ", prefill " + path);
      ASSERT_EQ(setenv("GA_MOE_PREFILL", path, 1), 0);
      ga::Session gpu(m.model, ga::test::cuda::family_session_options("cuda", 96));
      double worst = 0;
      rows += expect_logit_rows_close(m.tag + " prefill", gpu.eval(prompt, true), want, n_vocab, kMaxRelL2, worst);
      for (size_t i = 80; i < seq.size(); ++i) {
        rows += expect_logit_rows_close(m.tag + " decode", gpu.eval(std::span<const int32_t>(&seq[i], 1)),
                                        want_decode[i - 80], n_vocab, kMaxRelL2, worst);
      }
      std::printf("%-24s prefill %-10s worst rel L2 %.2e\n", m.tag.c_str(), path, worst);
    }
    unsetenv("GA_MOE_PREFILL");
  }
  EXPECT_GT(rows, 0u);
}

}  // namespace
