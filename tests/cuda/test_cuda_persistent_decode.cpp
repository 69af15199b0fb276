// The persistent decode kernel (backends/cuda/persistent/) against the CPU reference and the per-op GPU step.
//
// Every decode step of a Session with DecodeKernel::kPersistent (GA_DECODE_KERNEL=persistent) runs the kernel where
// the plan covers the model; its logits must stay within the engine's bar (rel L2 <= 1e-2 of the CPU reference's
// with an F16 KV cache) on:
//   * every family model of family_models.h (Qwen3's q/k norms, Gemma 2/3's post norms, soft-caps, sliding windows,
//     GeGLU, Phi-3's fused projections, YaRN / LongRoPE tables; F16 and the Q4_K_M mix), where the MoE models must
//     be refused with a reason and run per-op;
//   * stories260K (head dim 8, f32 weights) and the fixture model in every weight type the kernel decodes (Q4_0,
//     Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K through the int8 dot, and again on float activations);
//   * a context past several attention chunks (kAttnMinChunk positions each), so the split attention and its
//     log-sum-exp merge run, windowed and not;
//   * the paged face (CudaBatchForward, one sequence: the Scheduler's lone request) against its per-op step;
//   * the sm_80 copy path (cp.async instead of TMA bulk copies) on the same GPU.
// Greedy: stories260K's tokens from the persistent kernel equal the per-op GPU step's for 64 steps.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "common/test_data.h"
#include "cuda/cuda_harness.h"
#include "cuda/family_models.h"
#include "cuda/greedy_check.h"
#include "cuda/logits_check.h"
#include "cuda/random_test_model.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "model/arch/architecture.h"

namespace {

using ga::test::cuda::expect_logit_rows_close;

constexpr double kMaxRelL2 = 1e-2;

// Sets an environment variable for the scope of a test (the engine reads it at construction).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

bool is_moe(const std::string& tag) {
  return tag.find("moe") != std::string::npos || tag.find("mixtral") != std::string::npos;
}

// A prompt of `prompt` tokens (the per-op GEMV or GEMM step), then one-token decode steps up to `total` tokens,
// each compared with the CPU. Returns the rows compared; `worst` gets the worst rel L2.
size_t check_decode(const std::string& tag, const ga::LoadedModel& model, size_t prompt, size_t total, int64_t n_ctx,
                    bool expect_persistent, double& worst) {
  ga::Session cpu(model, ga::test::cuda::family_session_options("cpu", n_ctx));
  ga::Session gpu(model, ga::test::cuda::family_session_options("cuda", n_ctx));
  const std::string description = gpu.device_description();
  if (expect_persistent) {
    EXPECT_NE(description.find("decode: persistent kernel"), std::string::npos) << tag << ": " << description;
  } else {
    EXPECT_NE(description.find("the persistent kernel refused"), std::string::npos) << tag << ": " << description;
  }
  const int64_t n_vocab = model.config.n_vocab;
  const std::vector<int32_t> seq = ga::test::cuda::random_token_ids(n_vocab, total, 7);
  const std::span<const int32_t> head(seq.data(), prompt);
  size_t rows = expect_logit_rows_close(tag + " prompt", gpu.eval(head), cpu.eval(head), n_vocab, kMaxRelL2, worst);
  for (size_t i = prompt; i < total; ++i) {
    const std::span<const int32_t> one(&seq[i], 1);
    rows += expect_logit_rows_close(tag + " decode at " + std::to_string(i), gpu.eval(one), cpu.eval(one), n_vocab,
                                    kMaxRelL2, worst);
  }
  return rows;
}

TEST(CudaPersistentDecode, EveryFamilyMatchesTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  const ScopedEnv env("GA_DECODE_KERNEL", "persistent");
  size_t rows = 0;
  for (const ga::test::cuda::FamilyModel& m : ga::test::cuda::family_models()) {
    SCOPED_TRACE(m.tag);
    double worst = 0;
    rows += check_decode(m.tag, m.model, 5, 40, 96, !is_moe(m.tag), worst);
    std::printf("%-24s worst rel L2 %.2e\n", m.tag.c_str(), worst);
  }
  EXPECT_GT(rows, 0u);
}

TEST(CudaPersistentDecode, EveryWeightTypeMatchesTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  const ScopedEnv env("GA_DECODE_KERNEL", "persistent");
  size_t rows = 0;
  for (const char* type : {"f32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                           "Q6_K"}) {
    const std::string name = std::string("fixture-") + type;
    SCOPED_TRACE(name);
    double worst = 0;
    rows += check_decode(name, ga::load_model(ga::test::shared_path("fixtures/quant/" + name + ".gguf")), 4, 24, 64,
                         true, worst);
    std::printf("%-24s worst rel L2 %.2e\n", name.c_str(), worst);
  }
  double worst = 0;
  rows += check_decode("stories260K", ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf")), 3, 40,
                       64, true, worst);
  std::printf("%-24s worst rel L2 %.2e\n", "stories260K", worst);
  EXPECT_GT(rows, 0u);
}

// The types with an int8 dot (the default above) also on float activations, the GEMV path every other type takes.
TEST(CudaPersistentDecode, FloatActivationsMatchTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  const ScopedEnv env("GA_DECODE_KERNEL", "persistent");
  const ScopedEnv x("GA_PERSISTENT_X", "float");
  double worst = 0;
  for (const char* type : {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K"}) {
    const std::string name = std::string("fixture-") + type;
    SCOPED_TRACE(name);
    check_decode(name + " float x", ga::load_model(ga::test::shared_path("fixtures/quant/" + name + ".gguf")), 4, 24,
                 64, true, worst);
  }
  std::printf("float activations: worst rel L2 %.2e\n", worst);
}

// Positions past several chunks of kAttnMinChunk (32): the attention splits each KV head's positions over CTAs and
// the output projection merges the chunks; Gemma 2's sliding window of 24 bounds the span instead.
TEST(CudaPersistentDecode, LongContextsSplitTheAttention) {
  GA_REQUIRE_CUDA_DEVICE();
  const ScopedEnv env("GA_DECODE_KERNEL", "persistent");
  uint64_t seed = 41;
  for (const char* preset : {"tiny-qwen3", "tiny-gemma2"}) {
    const ga::LoadedModel model = ga::test::cuda::load_random_test_model("ga-pdk-long-", preset, "F16", seed++);
    double worst = 0;
    const size_t rows = check_decode(preset, model, 300, 330, 400, true, worst);
    std::printf("%-24s 300..330 positions: worst rel L2 %.2e\n", preset, worst);
    EXPECT_EQ(rows, 31u);
  }
}

TEST(CudaPersistentDecode, CpAsyncCopiesMatchTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  const ScopedEnv env("GA_DECODE_KERNEL", "persistent");
  const ScopedEnv copies("GA_PERSISTENT_COPIES", "cp.async");
  double worst = 0;
  for (const char* type : {"F16", "Q4_K", "Q6_K"}) {
    const std::string name = std::string("fixture-") + type;
    check_decode(name + " cp.async", ga::load_model(ga::test::shared_path("fixtures/quant/" + name + ".gguf")), 4, 24,
                 64, true, worst);
  }
  std::printf("cp.async copies: worst rel L2 %.2e\n", worst);
}

TEST(CudaPersistentDecode, GreedyTokensEqualThePerOpStep) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::load_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  ga::Session per_op(model, ga::test::cuda::family_session_options("cuda", 128));
  const ScopedEnv env("GA_DECODE_KERNEL", "persistent");
  ga::Session persistent(model, ga::test::cuda::family_session_options("cuda", 128));
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 471};
  EXPECT_GT(ga::test::cuda::expect_same_greedy_tokens("stories260K persistent", per_op, persistent, prompt, 64, 1e-3),
            0);
}

// The paged face with one sequence (a lone request of the Scheduler): prompt chunks, then decode steps, each
// compared with the per-op step of another forward over the same block table.
TEST(CudaPersistentDecode, PagedOneSequenceMatchesThePerOpStep) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::test::cuda::load_random_test_model("ga-pdk-paged-", "tiny-qwen3", "Q4_K_M", 5);
  ga::cuda::CudaBatchForwardParams p;
  p.block_size = 16;
  p.n_blocks = 40;
  p.max_batch_tokens = 64;
  p.max_seqs = 4;
  p.max_seq_positions = 320;
  const auto factory = ga::arch::make_program_factory(model);
  auto per_op = ga::cuda::make_cuda_batch_forward(model, *factory, p);
  p.decode_kernel = ga::cuda::DecodeKernel::kPersistent;
  auto persistent = ga::cuda::make_cuda_batch_forward(model, *factory, p);
  EXPECT_NE(persistent->description().find("decode: persistent kernel"), std::string::npos)
      << persistent->description();
  std::vector<int32_t> table(20);
  for (int32_t b = 0; b < 20; ++b) table[static_cast<size_t>(b)] = 39 - 2 * b;  // blocks apart, descending
  const std::vector<std::span<const int32_t>> tables = {table};
  const int64_t n_vocab = model.config.n_vocab;
  const std::vector<int32_t> seq = ga::test::cuda::random_token_ids(n_vocab, 300, 3);
  double worst = 0;
  size_t rows = 0;
  int64_t pos = 0;
  while (pos < 300) {
    const int64_t n = pos < 256 ? 64 : 1;  // chunks of 64, then decode steps from 256 on
    std::vector<ga::cuda::BatchEntry> batch;
    for (int64_t i = 0; i < n; ++i) batch.push_back({seq[static_cast<size_t>(pos + i)], pos + i, 0, i == n - 1});
    const std::span<const float> a = per_op->forward(batch, tables);
    const std::vector<float> want(a.begin(), a.end());
    const std::span<const float> got = persistent->forward(batch, tables);
    rows += expect_logit_rows_close("paged at " + std::to_string(pos), got, want, n_vocab, kMaxRelL2, worst);
    pos += n;
  }
  std::printf("paged one sequence: worst rel L2 %.2e over %zu rows\n", worst, rows);
  EXPECT_EQ(rows, 48u);
}

}  // namespace
