// The whole Llama forward pass on the GPU (Session device "cuda") against the CPU reference Session
// with an F16 KV cache, for every fixture model type and stories260K, plus greedy generation of
// stories260K against karpathy/llama2.c run.c (an independent implementation).
//
// Teacher forcing: the token sequence is llama.cpp's (fixture prompt ids + its 32 greedy ids), fed
// to both sessions the same way, so one model's divergence cannot change the other's inputs. Three
// feeding patterns cover the three code paths of the CUDA forward:
//   * the prompt as one batch of <= 8 tokens (the small-batch GEMV),
//   * each following token alone (the one-token step, replayed from a CUDA graph),
//   * the whole sequence as one batch of > 8 tokens after a reset (the cuBLAS GEMM prefill, with
//     quantized matrices dequantized to f16).
// Every row of logits must satisfy rel L2 <= 1e-2 (f16 KV cache on both sides; the GPU stages GEMM
// inputs in f16). Every fixture type has CUDA kernels (Q2_K and Q3_K included), so none may be
// refused; a run that compared nothing fails. Q4_0 / Q8_0 fixture matrices are 256 wide, so the Q8_0
// model runs on split rows (weight_layout.h): GEMV, embedding and prefill dequantizer of that layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "model/arch/architecture.h"
#include "common/test_data.h"
#include "cuda/cuda_harness.h"
#include "cuda/logits_check.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"

namespace {

using ga::test::cuda::expect_logit_rows_close;

constexpr double kMaxRelL2 = 1e-2;
const char* const kPrompts[] = {"once_upon_a_time", "the_little_dog"};

struct Sequence {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
};

Sequence fixture_sequence(const std::string& model, const std::string& prompt) {
  const nlohmann::json j = nlohmann::json::parse(
      ga::test::read_file(ga::test::shared_path("fixtures/logits/" + model + "__" + prompt + ".json")));
  return {j.at("prompt_ids").get<std::vector<int32_t>>(), j.at("generated_ids").get<std::vector<int32_t>>()};
}

ga::SessionOptions options(const std::string& device) {
  ga::SessionOptions o;
  o.n_ctx = 128;
  o.n_threads = 2;
  o.kv_type = ga::KvType::F16;
  o.device = device;
  return o;
}

int32_t argmax(const std::vector<float>& logits) {  // lowest id wins ties
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Runs the three feeding patterns on both devices; returns the rows compared.
size_t check_model(const std::string& model_name, const std::string& path) {
  const ga::LoadedModel model = ga::load_model(path);
  ga::Session cpu(model, options("cpu"));
  ga::Session gpu(model, options("cuda"));
  EXPECT_EQ(gpu.device(), "cuda:0");
  const int64_t n_vocab = model.config.n_vocab;
  size_t rows = 0;
  for (const char* prompt : kPrompts) {
    const Sequence seq = fixture_sequence(model_name, prompt);
    const std::string tag = model_name + "/" + prompt;
    cpu.reset();
    gpu.reset();
    double worst = 0.0;
    rows += expect_logit_rows_close(tag + " prompt batch", gpu.eval(seq.prompt, true), cpu.eval(seq.prompt, true),
                                    n_vocab, kMaxRelL2, worst);
    for (size_t i = 0; i < seq.generated.size(); ++i) {
      const std::span<const int32_t> one(&seq.generated[i], 1);
      rows += expect_logit_rows_close(tag + " decode step " + std::to_string(i), gpu.eval(one), cpu.eval(one), n_vocab,
                                      kMaxRelL2, worst);
    }
    std::vector<int32_t> all = seq.prompt;
    all.insert(all.end(), seq.generated.begin(), seq.generated.end());
    cpu.reset();
    gpu.reset();
    rows += expect_logit_rows_close(tag + " GEMM prefill of " + std::to_string(all.size()), gpu.eval(all, true),
                                    cpu.eval(all, true), n_vocab, kMaxRelL2, worst);
    std::printf("%-36s worst rel L2 %.2e over %zu tokens\n", tag.c_str(), worst, all.size());
  }
  return rows;
}

TEST(CudaForward, FixtureModelsMatchCpuSession) {
  GA_REQUIRE_CUDA_DEVICE();
  const char* const types[] = {"f32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                               "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K"};
  size_t rows = 0;
  for (const char* type : types) {
    const std::string name = std::string("fixture-") + type;
    SCOPED_TRACE(name);
    rows += check_model(name, ga::test::shared_path("fixtures/quant/" + name + ".gguf"));  // every type runs
  }
  std::printf("fixture models: %zu logit rows compared\n", rows);
  EXPECT_GT(rows, 0u) << "compared nothing";
}

TEST(CudaForward, Stories260KMatchesCpuSession) {
  GA_REQUIRE_CUDA_DEVICE();
  EXPECT_GT(check_model("stories260K", ga::test::shared_path("models/tinyllamas/stories260K.gguf")), 0u);
}

TEST(CudaForward, Stories260KGreedyMatchesLlama2c) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("models/tinyllamas/stories260K.gguf"));
  const nlohmann::json ref = nlohmann::json::parse(
      ga::test::read_file(ga::test::shared_path("models/tinyllamas/stories260K.greedy-reference.json")));
  ASSERT_GE(ref.at("cases").size(), 4u);
  ga::SessionOptions o = options("cuda");
  o.n_ctx = 256;
  ga::Session session(model, o);
  for (const nlohmann::json& c : ref.at("cases")) {
    SCOPED_TRACE("prompt '" + c.at("prompt").get<std::string>() + "'");
    const std::vector<int32_t> prompt = c.at("prompt_token_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> want = c.at("token_ids").get<std::vector<int32_t>>();
    ASSERT_GT(want.size(), prompt.size());
    session.reset();  // one session for all cases: the graph is reused across resets
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

// Where the int8 GEMV's x is rounded (cuda_forward.h, Int8Activations: in every GEMV CTA, once by SwiGLU for
// the down projection, also by a pre-pass for the output projection, and by the RMSNorms for q/k/v, gate/up
// and the classifier) changes which kernels run, not the rounding (x_int8.cuh): every mode must match the CPU
// session, and their logits must be bit-identical (the fixtures' 256-wide rows take the int8 kernels in every
// mode: Q8_0 split rows, GGUF-order Q4_0 and Q4_K, so nothing else differs).
class CudaForwardInt8 : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaForwardInt8, ModesAgreeBitForBit) {
  GA_REQUIRE_CUDA_DEVICE();
  const std::string fixture = GetParam();
  const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("fixtures/quant/" + fixture + ".gguf"));
  const int64_t n_vocab = model.config.n_vocab;
  const Sequence seq = fixture_sequence(fixture, "once_upon_a_time");
  std::vector<int32_t> prompt(seq.prompt.begin(), seq.prompt.begin() + std::min<size_t>(seq.prompt.size(), 5));
  ga::Session cpu(model, options("cpu"));
  std::vector<float> want = cpu.eval(prompt, true);  // [prompt rows + one row per decode step][n_vocab]
  for (const int32_t id : seq.generated) {
    const std::vector<float> row = cpu.eval(std::span<const int32_t>(&id, 1));
    want.insert(want.end(), row.begin(), row.end());
  }
  const ga::cuda::Int8Activations modes[] = {ga::cuda::Int8Activations::kInGemv, ga::cuda::Int8Activations::kOnceFfn,
                                             ga::cuda::Int8Activations::kOnceFfnAndAttnO,
                                             ga::cuda::Int8Activations::kOnceAll};
  std::vector<std::vector<float>> got;
  for (const ga::cuda::Int8Activations mode : modes) {
    ga::cuda::CudaForwardParams params;
    params.n_ctx = 128;
    params.int8_activations = mode;
    const std::unique_ptr<ga::cuda::CudaForward> gpu = ga::cuda::make_cuda_forward(model, *ga::arch::make_program_factory(model), params);
    std::vector<float> logits(prompt.size() * static_cast<size_t>(n_vocab));  // a small-batch GEMV step
    gpu->eval(prompt, 0, true, logits.data());
    int64_t pos = static_cast<int64_t>(prompt.size());
    for (const int32_t id : seq.generated) {  // one-token steps, replayed from the graph
      std::vector<float> row(static_cast<size_t>(n_vocab));
      gpu->eval(std::span<const int32_t>(&id, 1), pos++, false, row.data());
      logits.insert(logits.end(), row.begin(), row.end());
    }
    double worst = 0.0;
    const size_t rows = expect_logit_rows_close(
        fixture + " int8 activations mode " + std::to_string(static_cast<int>(mode)), logits, want, n_vocab, kMaxRelL2,
        worst);
    std::printf("%s int8 activations mode %d: worst rel L2 %.2e over %zu rows\n", fixture.c_str(),
                static_cast<int>(mode), worst, rows);
    EXPECT_GT(rows, 0u);
    got.push_back(std::move(logits));
  }
  EXPECT_TRUE(got[0] == got[1]) << "SwiGLU's rounding differs from the GEMV's own";
  EXPECT_TRUE(got[0] == got[2]) << "the pre-pass's rounding differs from the GEMV's own";
  EXPECT_TRUE(got[0] == got[3]) << "the RMSNorms' rounding differs from the GEMV's own";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaForwardInt8, ::testing::Values("fixture-Q8_0", "fixture-Q4_0", "fixture-Q4_K"));

// The graph replays exactly the kernels of a direct launch: logits must be bit-identical.
TEST(CudaForward, GraphReplayEqualsDirectLaunch) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("fixtures/quant/fixture-Q4_K.gguf"));
  ga::SessionOptions direct_options = options("cuda");
  direct_options.cuda_graphs = false;
  ga::Session graph(model, options("cuda"));
  ga::Session direct(model, direct_options);
  const Sequence seq = fixture_sequence("fixture-Q4_K", "the_little_dog");
  EXPECT_EQ(graph.eval(seq.prompt), direct.eval(seq.prompt));
  for (const int32_t id : seq.generated) {
    const std::span<const int32_t> one(&id, 1);
    ASSERT_EQ(graph.eval(one), direct.eval(one)) << "position " << graph.n_past();
  }
}

TEST(CudaForward, BadInputIsAnErrorAndChangesNothing) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = ga::load_gguf_model(ga::test::shared_path("fixtures/quant/fixture-Q8_0.gguf"));
  ga::SessionOptions o = options("cuda");
  o.n_ctx = 16;
  ga::Session session(model, o);
  const std::vector<int32_t> prompt = {1, 403, 407};
  const std::vector<float> first = session.eval(prompt);
  const int32_t bad[] = {5, 100000};
  try {
    session.eval(bad);
    ADD_FAILURE() << "an out-of-vocabulary id was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << e.what();
  }
  const std::vector<int32_t> too_long(14, 5);
  try {
    session.eval(too_long);
    ADD_FAILURE() << "a context overflow was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::OutOfRange) << e.what();
  }
  EXPECT_EQ(session.n_past(), 3);
  session.reset();
  EXPECT_EQ(session.eval(prompt), first);  // the session still works and is deterministic
  try {
    ga::SessionOptions wrong = options("cuda:99");
    ga::Session missing(model, wrong);
    ADD_FAILURE() << "device cuda:99 was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << e.what();
  }
}

}  // namespace
