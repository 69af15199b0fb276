// The CUDA forward on FP4 models against the CPU Session: random make-model models whose matrices are MXFP4 or
// NVFP4 (make-model's file types: every matrix and token_embd in the type, the classifier Q8_0), a dense Llama
// and a Qwen3-MoE (its experts through the grouped expert GEMV and, for 80 tokens, the MoE prefill). No fixture
// model is FP4, so these are the whole-model check of the FP4 decoders: the embedding gather (token_embd), the
// decode GEMV (one token, and the prompt's 5 as a small batch), the prefill's f16 dequantizer (the 40- and
// 80-token prefills). With GA_DECODE_KERNEL=persistent the engine must take the per-op step (the persistent
// kernel's plan refuses FP4 matrices by type) and still match.
// Tolerance: rel L2 <= 1e-2 per logit row, as every forward test (F16 KV cache on both sides, f16 GEMM inputs).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_harness.h"
#include "cuda/family_models.h"
#include "cuda/logits_check.h"
#include "cuda/random_test_model.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"

namespace {

using ga::test::cuda::expect_logit_rows_close;

constexpr double kMaxRelL2 = 1e-2;

// Rows compared: a 5-token prompt, decode steps to 40 tokens, then (after a reset) prefills of 40 and 80 tokens.
size_t check_against_cpu(const std::string& tag, const ga::LoadedModel& model, double& worst) {
  ga::Session cpu(model, ga::test::cuda::family_session_options("cpu", 96));
  ga::Session gpu(model, ga::test::cuda::family_session_options("cuda", 96));
  EXPECT_EQ(gpu.device(), "cuda:0") << tag;
  const int64_t n_vocab = model.config.n_vocab;
  const std::vector<int32_t> seq = ga::test::cuda::random_token_ids(n_vocab, 80, 13);
  const std::span<const int32_t> prompt(seq.data(), 5);
  size_t rows = expect_logit_rows_close(tag + " prompt", gpu.eval(prompt, true), cpu.eval(prompt, true), n_vocab,
                                        kMaxRelL2, worst);
  for (size_t i = 5; i < 40; ++i) {
    const std::span<const int32_t> one(&seq[i], 1);
    rows += expect_logit_rows_close(tag + " decode " + std::to_string(i), gpu.eval(one), cpu.eval(one), n_vocab,
                                    kMaxRelL2, worst);
  }
  for (const size_t n : {size_t{40}, size_t{80}}) {
    cpu.reset();
    gpu.reset();
    const std::span<const int32_t> all(seq.data(), n);
    rows += expect_logit_rows_close(tag + " prefill " + std::to_string(n), gpu.eval(all, true), cpu.eval(all, true),
                                    n_vocab, kMaxRelL2, worst);
  }
  return rows;
}

TEST(CudaForwardFp4, RandomFp4ModelsMatchTheCpuSession) {
  GA_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 71;
  size_t rows = 0;
  for (const char* preset : {"tiny", "tiny-qwen3moe"}) {
    for (const ga::DType type : {ga::DType::MXFP4, ga::DType::NVFP4}) {
      const std::string tag = std::string(preset) + " " + ga::dtype_name(type);
      SCOPED_TRACE(tag);
      const ga::LoadedModel model =
          ga::test::cuda::load_random_test_model("ga-fp4-", preset, ga::dtype_name(type), seed++);
      int n_fp4 = 0;
      for (const auto& [name, w] : model.weights) n_fp4 += w.type == type;
      EXPECT_GE(n_fp4, 9) << "token_embd and each layer's matrices";
      double worst = 0.0;
      rows += check_against_cpu(tag, model, worst);
      std::printf("%-24s worst rel L2 %.2e\n", tag.c_str(), worst);
    }
  }
  EXPECT_GT(rows, 0u);
}

TEST(CudaForwardFp4, PersistentDecodeRequestFallsBackToThePerOpStep) {
  GA_REQUIRE_CUDA_DEVICE();
  ASSERT_EQ(setenv("GA_DECODE_KERNEL", "persistent", 1), 0);
  const ga::LoadedModel model = ga::test::cuda::load_random_test_model("ga-fp4-pdk-", "tiny", "MXFP4", 79);
  {
    // the refusal names the type (a persistent kernel that gains FP4 decoders changes this expectation)
    const ga::Session gpu(model, ga::test::cuda::family_session_options("cuda", 96));
    const std::string description = gpu.device_description();
    EXPECT_NE(description.find("no persistent GEMV decoder for MXFP4"), std::string::npos) << description;
  }
  double worst = 0.0;
  const size_t rows = check_against_cpu("tiny MXFP4 persistent requested", model, worst);
  unsetenv("GA_DECODE_KERNEL");
  std::printf("%-32s worst rel L2 %.2e\n", "tiny MXFP4, persistent requested", worst);
  EXPECT_GT(rows, 0u);
}

}  // namespace
