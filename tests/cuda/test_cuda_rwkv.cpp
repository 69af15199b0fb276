// RWKV v4, v5.1, v5.2, v6, v7 on the GPU (the recurrent ops of backends/cuda/engine/cuda_engine_recurrent.cpp)
// against the CPU reference, on rwkv.cpp's tiny models (../shared/models/rwkv-tiny):
//  * the Session: a 5-token prompt (the small-batch GEMV), one-token steps after it (the decode graph), and the
//    whole 40-token sequence as one prefill after a reset (the GEMM path, quantized matrices dequantized), every
//    row within 1e-2 rel L2 of the CPU Session's (the engine's bar);
//  * rwkv.cpp's own check on the GPU: the bytes '"', 'i', 'n' from the initial state against its expected logits
//    (2% rel L2 and the same most likely byte, as tests/runtime/test_rwkv.cpp asks of the CPU);
//  * greedy text: 24 tokens chosen by each device alone are the same (near-ties end the comparison, as in
//    test_cuda_arch_forward.cpp);
//  * the Scheduler on the GPU: concurrent greedy requests equal each one alone on the CPU, and more sequences
//    over time than state slots (slots are taken over by new sequences), repeated prompts starting from the
//    prompt-state cache's snapshots;
//  * the state rules: a rewind is refused, reset starts over, a batch continuing a sequence where its state does
//    not stand is refused before any work;
//  * llama.cpp-layout GGUFs of the tiny v6 (rescaled: the stream's halving) and v7 models, against the CPU;
//  * random-weight v6 and v7 models with several heads of 64 (make-model's tiny presets; rwkv.cpp's tiny models
//    have one head), so that the WKV kernels' per-head indexing is checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "common/process.h"
#include "common/greedy_requests.h"
#include "common/test_data.h"
#include "cuda/cuda_harness.h"
#include "cuda/greedy_check.h"
#include "cuda/logits_check.h"
#include "gpu_accel/error.h"
#include "gpu_accel/scheduler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"
#include "model/arch/architecture.h"
#include "model/tools/random_model.h"
#include "model/tools/rwkv_to_gguf.h"

namespace {

using ga::test::cuda::expect_logit_rows_close;

constexpr double kMaxRelL2 = 1e-2;
constexpr double kNearTie = 1e-3;

struct TinyModel {
  const char* version;  // expected-logits-<version>.bin
  const char* format;   // tiny-rwkv-<version>-<format>.bin
};
constexpr TinyModel kModels[] = {{"4v0-660K", "FP16"}, {"5v1-730K", "FP16"}, {"5v2-730K", "FP16"},
                                 {"6v0-3m", "Q5_0"},   {"6v0-3m", "Q5_1"},   {"7v0-834K", "FP16"}};

std::string tag(const TinyModel& m) { return std::string(m.version) + "-" + m.format; }

ga::LoadedModel load(const TinyModel& m) {
  return ga::load_model(
      ga::test::shared_path(std::string("models/rwkv-tiny/tiny-rwkv-") + m.version + "-" + m.format + ".bin"));
}

ga::SessionOptions options(const std::string& device) {
  ga::SessionOptions o;
  o.n_ctx = 96;
  o.n_threads = 2;
  o.device = device;
  return o;
}

std::vector<int32_t> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(32, 126);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = pick(rng);
  return out;
}

TEST(CudaRwkv, SessionMatchesTheCpuOnEveryVersion) {
  GA_REQUIRE_CUDA_DEVICE();
  size_t rows = 0;
  for (const TinyModel& t : kModels) {
    SCOPED_TRACE(tag(t));
    const ga::LoadedModel model = load(t);
    ga::Session cpu(model, options("cpu"));
    ga::Session gpu(model, options("cuda"));
    ASSERT_EQ(gpu.device(), "cuda:0");
    const int64_t n_vocab = model.config.n_vocab;
    const std::vector<int32_t> seq = random_bytes(40, 5);
    double worst = 0;
    const std::span<const int32_t> prompt(seq.data(), 5);
    rows += expect_logit_rows_close(tag(t) + " prompt", gpu.eval(prompt, true), cpu.eval(prompt, true), n_vocab,
                                    kMaxRelL2, worst);
    for (size_t i = 5; i < seq.size(); ++i) {
      const std::span<const int32_t> one(&seq[i], 1);
      rows += expect_logit_rows_close(tag(t) + " decode " + std::to_string(i), gpu.eval(one), cpu.eval(one), n_vocab,
                                      kMaxRelL2, worst);
    }
    cpu.reset();
    gpu.reset();
    rows += expect_logit_rows_close(tag(t) + " prefill", gpu.eval(seq, true), cpu.eval(seq, true), n_vocab, kMaxRelL2,
                                    worst);
    std::printf("%-16s worst rel L2 %.2e\n", tag(t).c_str(), worst);
  }
  EXPECT_GT(rows, 0u);
}

// llama.cpp-layout GGUFs of the tiny models (model/arch/rwkv_gguf.cpp): the same forward over renamed views, and
// for the v6 one written with rescale_every_n_layers 2 the stream's halving (op scale) on the GPU too.
TEST(CudaRwkv, GgufFilesMatchTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  ga::test::TempDir dir("ga_cuda_rwkv_gguf");
  struct Conversion {
    TinyModel model;
    int64_t rescale_every;
  };
  size_t rows = 0;
  for (const Conversion& c : {Conversion{{"6v0-3m", "Q5_1"}, 2}, Conversion{{"7v0-834K", "FP16"}, 0}}) {
    SCOPED_TRACE(tag(c.model));
    ga::tools::RwkvToGgufOptions o;
    o.rescale_every = c.rescale_every;
    o.dequantize = c.rescale_every > 0;
    const std::string path = dir.file(tag(c.model) + ".gguf");
    ga::tools::write_rwkv_cpp_as_gguf(load(c.model), path, o);
    const ga::LoadedModel model = ga::load_model(path);
    ASSERT_EQ(model.config.rwkv.rescale_every, c.rescale_every);
    ga::Session cpu(model, options("cpu"));
    ga::Session gpu(model, options("cuda"));
    const std::vector<int32_t> seq = random_bytes(24, 11);
    double worst = 0;
    const std::span<const int32_t> prompt(seq.data(), 6);
    rows += expect_logit_rows_close(tag(c.model) + " gguf prompt", gpu.eval(prompt, true), cpu.eval(prompt, true),
                                    model.config.n_vocab, kMaxRelL2, worst);
    for (size_t i = 6; i < seq.size(); ++i) {
      const std::span<const int32_t> one(&seq[i], 1);
      rows += expect_logit_rows_close(tag(c.model) + " gguf decode " + std::to_string(i), gpu.eval(one), cpu.eval(one),
                                      model.config.n_vocab, kMaxRelL2, worst);
    }
    std::printf("%-16s GGUF worst rel L2 %.2e\n", tag(c.model).c_str(), worst);
  }
  EXPECT_GT(rows, 0u);
}

TEST(CudaRwkv, RandomMultiHeadModelsMatchTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  ga::test::TempDir dir("ga_cuda_rwkv_random");
  size_t rows = 0;
  for (const char* preset : {"tiny-rwkv6", "tiny-rwkv7"}) {
    SCOPED_TRACE(preset);
    ga::tools::MakeModelOptions o;
    o.preset = preset;
    o.type = "F16";
    o.seed = 3;
    o.n_threads = 2;
    const std::string path = dir.file(std::string(preset) + ".gguf");
    ga::tools::make_random_model(path, o);
    const ga::LoadedModel model = ga::load_model(path);
    ASSERT_GT(model.config.n_head, 1);
    ga::Session cpu(model, options("cpu"));
    ga::Session gpu(model, options("cuda"));
    const int64_t n_vocab = model.config.n_vocab;
    const std::vector<int32_t> seq = random_bytes(48, 13);
    double worst = 0;
    const std::span<const int32_t> prompt(seq.data(), 7);
    rows += expect_logit_rows_close(std::string(preset) + " prompt", gpu.eval(prompt, true), cpu.eval(prompt, true),
                                    n_vocab, kMaxRelL2, worst);
    for (size_t i = 7; i < 16; ++i) {
      const std::span<const int32_t> one(&seq[i], 1);
      rows += expect_logit_rows_close(std::string(preset) + " decode " + std::to_string(i), gpu.eval(one),
                                      cpu.eval(one), n_vocab, kMaxRelL2, worst);
    }
    cpu.reset();
    gpu.reset();
    rows += expect_logit_rows_close(std::string(preset) + " prefill", gpu.eval(seq, true), cpu.eval(seq, true),
                                    n_vocab, kMaxRelL2, worst);
    std::printf("%-16s worst rel L2 %.2e\n", preset, worst);
  }
  EXPECT_GT(rows, 0u);
}

TEST(CudaRwkv, MatchesRwkvCppExpectedLogits) {
  GA_REQUIRE_CUDA_DEVICE();
  for (const TinyModel& t : kModels) {
    SCOPED_TRACE(tag(t));
    const ga::LoadedModel model = load(t);
    const std::vector<float> expected = ga::test::read_f32_file(
        ga::test::shared_path(std::string("models/rwkv-tiny/expected-logits-") + t.version + ".bin"));
    ASSERT_EQ(expected.size(), 256u);
    ga::Session gpu(model, options("cuda"));
    std::vector<float> serial;
    for (const int32_t b : {'"', 'i', 'n'}) serial = gpu.eval(std::vector<int32_t>{b});
    const double e = ga::test::rel_l2(serial.data(), expected.data(), expected.size());
    EXPECT_LT(e, 2e-2);
    EXPECT_EQ(std::max_element(serial.begin(), serial.end()) - serial.begin(),
              std::max_element(expected.begin(), expected.end()) - expected.begin());
    std::printf("%-16s rel L2 to rwkv.cpp's expected logits %.2e\n", tag(t).c_str(), e);
  }
}

TEST(CudaRwkv, GreedyTokensMatchTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  for (const TinyModel& t : kModels) {
    SCOPED_TRACE(tag(t));
    const ga::LoadedModel model = load(t);
    ga::Session cpu(model, options("cpu"));
    ga::Session gpu(model, options("cuda"));
    const std::vector<int32_t> prompt = random_bytes(8, 9);
    const int compared = ga::test::cuda::expect_same_greedy_tokens(tag(t), cpu, gpu, prompt, 24, kNearTie);
    EXPECT_GT(compared, 0);
  }
}

// Requests through the GPU Scheduler: `rounds` batches of concurrent greedy requests (more sequences in all than
// the engine has state slots), each equal to the same prompt generated alone by a CPU Session.
TEST(CudaRwkv, SchedulerRequestsEqualEachAloneOnTheCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  for (const TinyModel& t : {kModels[2], kModels[3], kModels[5]}) {
    SCOPED_TRACE(tag(t));
    const ga::LoadedModel model = load(t);
    const ga::Tokenizer tok(model.vocab);
    ga::SchedulerOptions opt;
    opt.n_ctx = 128;
    opt.n_threads = 2;
    opt.max_running = 4;  // 8 state slots; 12 requests below
    opt.device = "cuda";
    opt.prompt_state_min_tokens = 16;  // the tiny models' byte prompts are short
    ga::Scheduler sched(model, tok, opt);
    EXPECT_EQ(sched.stats().device, "cuda:0");
    const std::string common = "Once upon a time there was a little girl who ";
    const std::vector<std::string> prompts = {common + "liked", common + "went", common + "had a", "The",
                                              "A dog", common + "liked", "Tom and", "She said"};
    std::vector<std::string> all;
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < 4; ++i) all.push_back(prompts[(round * 3 + i) % prompts.size()]);
    }
    const std::vector<std::vector<int32_t>> got = ga::test::run_greedy_requests(sched, tok, all, 24, 4);
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(got[i], ga::test::greedy_alone(model, tok, all[i], 24, 128)) << "request " << i << ": " << all[i];
    }
    // the repeated prompts started from states the prompt-state cache kept (copied out of and back into slots)
    EXPECT_GT(sched.stats().prompt_state_hits, 0u);
  }
}

TEST(CudaRwkv, StateCannotRewindAndBadBatchesAreRefused) {
  GA_REQUIRE_CUDA_DEVICE();
  const ga::LoadedModel model = load(kModels[2]);
  ga::Session gpu(model, options("cuda"));
  std::vector<int32_t> text;
  for (const char ch : std::string("The quick brown fox jumps")) text.push_back(static_cast<unsigned char>(ch));
  const std::vector<float> whole = gpu.eval(text);
  gpu.truncate(3);
  try {
    gpu.eval(std::vector<int32_t>{'x'});
    FAIL() << "a rewound recurrent state was accepted";
  } catch (const ga::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot go back"), std::string::npos) << e.what();
  }
  gpu.reset();
  std::vector<float> pieces = gpu.eval(std::vector<int32_t>(text.begin(), text.begin() + 11));
  pieces = gpu.eval(std::vector<int32_t>(text.begin() + 11, text.end()));
  double worst = 0;
  expect_logit_rows_close("chunks vs whole", pieces, whole, model.config.n_vocab, 1e-4, worst);

  ga::cuda::CudaBatchForwardParams p;
  p.n_blocks = 8;
  p.block_size = 16;
  p.max_batch_tokens = 32;
  p.max_seqs = 2;
  p.max_seq_positions = 64;
  auto batch = ga::cuda::make_cuda_batch_forward(model, *ga::arch::make_program_factory(model), p);
  const std::vector<int32_t> table_a = {3, 1}, table_b = {5};
  const std::vector<std::span<const int32_t>> tables = {table_a, table_b};
  const auto refused = [&](std::vector<ga::cuda::BatchEntry> entries, const char* what,
                           std::span<const std::span<const int32_t>> with = {}) {
    try {
      batch->forward(entries, with.empty() ? std::span<const std::span<const int32_t>>(tables) : with);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ga::Error& e) {
      EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << what << ": " << e.what();
    }
  };
  refused({{'a', 3, 0, true}}, "a sequence that never started continues");
  (void)batch->forward(std::vector<ga::cuda::BatchEntry>{{'a', 0, 0, false}, {'b', 1, 0, true}}, tables);
  refused({{'c', 5, 0, true}}, "a sequence continues past where its state stands");
  refused({{'c', 1, 0, true}}, "a sequence goes back");
  const std::vector<std::span<const int32_t>> shared = {table_a, table_a};
  refused({{'c', 0, 0, true}, {'d', 0, 1, true}}, "two runs on one state", shared);
  // After the refusals the sequence continues where it stood.
  const std::span<const float> out = batch->forward(std::vector<ga::cuda::BatchEntry>{{'c', 2, 0, true}}, tables);
  ASSERT_EQ(out.size(), static_cast<size_t>(model.config.n_vocab));
  ga::Session cpu(model, options("cpu"));
  const std::vector<float> want = cpu.eval(std::vector<int32_t>{'a', 'b', 'c'});
  worst = 0;
  expect_logit_rows_close("continued after refusals", out, want, model.config.n_vocab, kMaxRelL2, worst);
}

}  // namespace
